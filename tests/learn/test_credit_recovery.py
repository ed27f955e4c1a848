"""Credit in `tfgrpo learn` on the noisy world (tests/helpers/noisy_world.py): the default run recovers from
harmful lessons without a validation set, at no extra call, and the evidence is where users look for it."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.helpers.noisy_world import (
    HARMFUL_RULES,
    TRUE_RULE,
    expected_accuracy,
    library_holds,
    run_noisy_learn,
)
from tfgrpo.cli.app import app
from tfgrpo.experiences import Library, export_text
from tfgrpo.experiences.model import Experience
from tfgrpo.learn.credit import left_out, record_credit, summary_lines
from tfgrpo.learn.groups import Group
from tfgrpo.rollout.sampling import Rollout

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("seed", range(200, 210))
def test_the_default_run_ends_with_the_true_rule_and_no_harmful_one(tmp_path, seed):
    result, world = run_noisy_learn(tmp_path, seed, train=100)
    holds = library_holds(result.library)
    assert holds == {"true": True, "harmful": False, "gibberish": False}
    assert expected_accuracy(result.library) >= 0.85  # the true rule alone: 0.90
    retired = {row["text"] for row in result.metrics["retired"]}
    assert retired <= set(HARMFUL_RULES) and retired  # what was retired is what hurt, nothing else
    # no extra call: G rollouts a query a step, then the three stages; nothing else
    calls = Counter(world.calls)
    assert calls["rollout"] == 100 * 5 * 3 and set(calls) == {"rollout", "summary", "group", "consolidate"}


@pytest.mark.parametrize("seed", [200, 201, 202])
def test_with_a_validation_set_and_the_gate_as_well(tmp_path, seed):
    result, _ = run_noisy_learn(tmp_path, seed, train=100, val_data="auto", gate=True)
    assert library_holds(result.library) == {"true": True, "harmful": False, "gibberish": False}


def test_without_credit_the_harmful_rule_stays(tmp_path):
    """The contrast that makes the tests above mean something: the paper's algorithm keeps it."""
    result, world = run_noisy_learn(tmp_path, 200, train=100, credit_leave_out=0.0)
    assert library_holds(result.library)["harmful"] and not result.metrics["retired"]
    assert all(not r.get("left_out") for r in _rollout_rows(tmp_path))


def test_retirement_is_in_the_history_and_rollback_undoes_it(tmp_path):
    result, _ = run_noisy_learn(tmp_path, 200, train=100)
    run = tmp_path / "run"
    ops = [json.loads(line) for line in (run / "library.history" / "ops.jsonl").read_text().splitlines()]
    retired = [r for r in ops if r["kind"] == "retired"]
    assert retired and all(r["reason"] == "credit" and r["credit"]["high"] < 0 for r in retired)
    deletes = {r["op"]["id"] for r in ops if r["kind"] == "applied" and r["op"]["option"] == "delete"}
    assert {r["ids"][0] for r in retired} <= deletes
    library = Library.load(run / "library.json")
    assert {r.text for r in library.retired} == {r["text"] for r in retired}
    before = min(r["version"] for r in retired) - 1
    outcome = CliRunner().invoke(app, ["library", "rollback", str(run / "library.json"), "--to", str(before)])
    assert outcome.exit_code == 0, outcome.output
    restored = Library.load(run / "library.json")
    assert any(e.text == retired[0]["text"] for e in restored) and not restored.find_retired(retired[0]["text"])


def test_credit_is_shown_exported_and_summarised(tmp_path):
    result, _ = run_noisy_learn(tmp_path, 201, train=100)
    path = tmp_path / "run" / "library.json"
    true_rule = next(e for e in result.library if e.text == TRUE_RULE)
    assert true_rule.credit.verdict() == "helps" and true_rule.credit.low > 0

    shown = CliRunner().invoke(app, ["library", "show", str(path)], env={"COLUMNS": "250"})
    assert shown.exit_code == 0 and true_rule.credit.describe() in shown.output
    assert "retired" in shown.output and "credit" in shown.output

    for fmt in ("json", "yaml"):
        exported = export_text(Library.load(path), fmt)
        assert f"effect: {true_rule.credit.effect}" in exported or f'"effect": {true_rule.credit.effect}' in exported

    lines = summary_lines(result.metrics)
    assert lines[0].startswith("credit") and any(line.startswith("retired by credit") for line in lines)
    assert any(f"{true_rule.id}: {true_rule.credit.effect:+.2f}" in line and "helps" in line for line in lines)
    assert {"credit", "retired", "reward_collapses"} <= set(result.metrics)
    assert result.metrics["totals"]["credit_contrasts"] > 0


def test_the_compare_report_shows_each_experiences_effect(tmp_path):
    from tfgrpo.eval.report_tables import _credit

    run_noisy_learn(tmp_path, 202, train=100)
    data = json.loads((tmp_path / "run" / "library.json").read_text())
    cell = _credit(data["experiences"][0]["credit"])
    assert cell.endswith(f"n={data['experiences'][0]['credit']['groups']}") and "[" in cell
    assert _credit({}) == "–"


def test_a_rerun_sends_the_same_leave_outs(tmp_path):
    """The design is a hash of (seed, step, query, sample, experience): a resumed run replays the same prompts."""
    first, _ = run_noisy_learn(tmp_path / "a", 203, train=30)
    second, _ = run_noisy_learn(tmp_path / "b", 203, train=30)
    rows_a, rows_b = _rollout_rows(tmp_path / "a"), _rollout_rows(tmp_path / "b")
    assert [r.get("left_out") for r in rows_a] == [r.get("left_out") for r in rows_b]
    assert any(r.get("left_out") for r in rows_a)
    assert first.library.to_json() == second.library.to_json()
    rates = {"G0": 0.2, "G1": 0.2}
    draws = [left_out(rates, seed=1, step=2, query_id="q", sample=s) for s in range(2000)]
    assert draws == [left_out(rates, seed=1, step=2, query_id="q", sample=s) for s in range(2000)]
    share = sum("G0" in d for d in draws) / len(draws)
    assert 0.17 < share < 0.23


def test_a_homogeneous_group_still_feeds_credit():
    """Every rollout with the lesson fails and every one without it fails too: no stage-2 signal, yet evidence."""
    library = Library(experiences=[Experience(id="G0", text="Multiply the key by 73.")])
    rollouts = [
        Rollout(query_id="q", sample=i, messages=[], reward=0.0, left_out=["G0"] if i < 2 else []) for i in range(5)
    ]
    group = Group(problem=None, experiences="", injected_ids=["G0"], rollouts=rollouts, status="homogeneous")
    assert record_credit(library, [group]) == 1
    assert library.get("G0").credit.groups == 1 and library.get("G0").credit.effect == 0.0


def test_stage_two_is_shown_what_each_attempt_ran_without(tmp_path):
    _, world = run_noisy_learn(tmp_path, 204, train=30)
    marked = [p for p in world.group_prompts if 'without="G' in p]
    assert marked and all("left out of its prompt (chosen at random)" in p for p in marked)
    assert any('without="G' not in p for p in world.group_prompts)  # the first step's library is empty


def measured_library(path: Path, *, hurts: str, helps: str) -> None:
    """G0 and G1 measured over 6 queries (the one that hurts first), G2 never measured; saved at `path`."""
    library = Library.from_texts([hurts, helps, "Read carefully."])
    for _ in range(6):
        library.get("G0").credit.add([0, 0, 0], [1, 1])
        library.get("G1").credit.add([1, 1, 1], [0, 0])
    library.save(path)


def test_prune_by_credit_offline(tmp_path):
    path = tmp_path / "library.json"
    measured_library(path, hurts="Multiply the key by 73.", helps="Multiply the key by 37.")
    outcome = CliRunner().invoke(app, ["library", "prune", str(path), "--by-credit"])
    assert outcome.exit_code == 0, outcome.output
    assert "retired 1 (G0) of 2 with a measured credit" in outcome.output
    pruned = Library.load(path)
    assert pruned.ids == ["G1", "G2"] and pruned.retired[0].text == "Multiply the key by 73."
    ops = (tmp_path / "library.history" / "ops.jsonl").read_text()
    assert '"kind": "retired"' in ops and '"reason": "credit"' in ops
    refused = CliRunner().invoke(app, ["library", "prune", str(path)])
    assert refused.exit_code != 0 and "--by-credit" in refused.output


def _rollout_rows(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "run" / "rollouts.jsonl").read_text().splitlines() if line.strip()]


def test_a_collapse_of_the_training_reward_is_detected_and_said():
    from tfgrpo.learn.credit import collapse_line, reward_collapse

    before = {"step": 4, "correct": 60, "rollouts_scored": 100}
    collapse = reward_collapse(before, correct=5, scored=100)
    assert collapse["from_step"] == 4 and collapse["accuracy_before"] == 0.6 and collapse["p"] < 1e-6
    assert "collapsed after step 4: 0.600 -> 0.050" in collapse_line(collapse)
    assert reward_collapse(before, correct=52, scored=100) is None  # a drop within noise
    assert reward_collapse(before, correct=3, scored=10) is None  # too few rollouts to tell a 0.3 drop
    assert reward_collapse(None, correct=0, scored=100) is None  # the first step has nothing to fall from
    metrics = {"reward_collapses": [{"step": 5, **collapse}]}
    assert summary_lines(metrics) == [f"step 5: {collapse_line(collapse)}"]


def test_export_ships_only_what_credit_lets_through(tmp_path):
    path = tmp_path / "library.json"
    measured_library(path, hurts="Multiply the key by 73.", helps="Multiply the key by 37.")
    runner = CliRunner()

    def shipped(credit: str) -> str:
        out = tmp_path / f"{credit}.txt"
        outcome = runner.invoke(app, ["export", str(path), "-f", "txt", "--out", str(out), "--credit", credit])
        assert outcome.exit_code == 0, outcome.output
        return out.read_text()

    assert shipped("all").count("[G") == 3
    assert "[G0]" not in shipped("not-hurting") and "[G2]" in shipped("not-hurting")
    assert shipped("helps").strip() == "[G1]. Multiply the key by 37."
    Library.from_texts(["Read carefully."]).save(path)  # nothing measured to help: nothing ships
    out = tmp_path / "prompt.txt"
    outcome = runner.invoke(app, ["export", str(path), "-f", "system-prompt", "--out", str(out), "--credit", "helps"])
    assert outcome.exit_code == 0 and "1 left out by --credit helps" in outcome.output
    assert out.read_text() == ""  # an empty library sends no system message, so its prompt is empty
    bad = runner.invoke(app, ["export", str(path), "-f", "txt", "--out", str(out), "--credit", "some"])
    assert bad.exit_code != 0 and "--credit must be one of" in bad.output
