"""Leakage guards: leaked answers (number and equivalent expression) and copied problems are caught, in the
checker, in `tfgrpo learn` after every step, in `tfgrpo library check`, in `eval --library` and in `compare`."""

from __future__ import annotations

import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console
from typer.testing import CliRunner

from tests.helpers.learn_world import World, write_problems
from tfgrpo.cli.app import app
from tfgrpo.eval.compare import compare_runs
from tfgrpo.eval.runner import EvalConfig, evaluate
from tfgrpo.experiences import Library
from tfgrpo.experiences.leakage import LeakageChecker
from tfgrpo.learn.config import LearnConfig
from tfgrpo.learn.loop import learn
from tfgrpo.llm.backends.scripted import ScriptedBackend
from tfgrpo.llm.factory import build_client

pytestmark = pytest.mark.timeout(180)

PROBLEMS = [
    SimpleNamespace(id="sum", problem="What is 17+25?", answer="42"),
    SimpleNamespace(
        id="half", problem="A fair coin is tossed once. What is the probability of heads?", answer="\\frac{1}{2}"
    ),
    SimpleNamespace(id="trig", problem="Compute the sine of sixty degrees exactly.", answer="\\frac{\\sqrt{3}}{2}"),
    SimpleNamespace(id="tiny", problem="How many wheels does a bicycle have?", answer="2"),
    SimpleNamespace(
        id="walk",
        answer="204",
        problem="Every morning Aya goes for a 9-kilometer-long walk and stops at a coffee shop afterwards.",
    ),
]


def kinds(text: str) -> set[tuple[str, str]]:
    return {(f.kind, f.problem_id) for f in LeakageChecker({"train": PROBLEMS}).check([("G0", text)])}


class TestChecker:
    def test_a_leaked_number_is_caught(self):
        assert kinds("For this sum the answer is 42.") == {("answer", "sum")}
        assert kinds("Long walks: the total is 204 minutes.") == {("answer", "walk")}

    def test_an_equivalent_expression_is_caught(self):
        assert kinds("The answer is $\\frac{84}{2}$.") == {("answer", "sum")}  # 84/2 = 42, exactly
        assert kinds("Heads comes up with probability 0.5.") == {("answer", "half")}
        assert kinds("Heads comes up with probability 2/4.") == {("answer", "half")}

    def test_an_equivalent_expression_is_caught_by_math_verify(self):
        # not a plain number: decided by the math reward's math-verify workers
        assert kinds("Remember that it equals $\\sqrt{3}/2$ here.") == {("answer", "trig")}

    def test_a_copied_problem_is_caught(self):
        found = LeakageChecker({"train": PROBLEMS}).check(
            [("G3", "Aya goes for a 9-kilometer-long walk and stops at a coffee shop: track time.")]
        )
        assert [(f.kind, f.problem_id, f.experience_id) for f in found] == [("copy", "walk", "G3")]
        assert found[0].overlap >= 0.5

    def test_a_clean_library_passes(self):
        library = Library.from_texts(
            [
                "When adding 17 and 25, check the carry.",  # operands are not the answer
                "Check 2 cases before answering.",  # small integers are not evidence
                "Simplify fractions like $\\frac{2}{3}$ before boxing.",
                "Verify the final answer by substituting back.",
            ]
        )
        assert LeakageChecker({"train": PROBLEMS}).check_library(library) == []


def run_learn(tmp_path: Path, world: World, pairs, console: Console | None = None, **settings):
    tmp_path.mkdir(parents=True, exist_ok=True)
    data = write_problems(tmp_path / "train.jsonl", pairs)
    config = LearnConfig(
        data=str(data),
        out=str(tmp_path / "run"),
        dedup=False,
        llm={"max_retries": 0},
        **{"group_size": 2, "epochs": 1, **settings},
    )
    client = build_client(
        config.llm, backends=[ScriptedBackend(world.respond)], cache_path=Path(config.out) / "cache.sqlite"
    )
    return learn(config, client=client, console=console or Console(file=io.StringIO()))


PAIRS = [(17, 25), (30, 41)]


def test_learn_rejects_operations_that_leak_an_answer(tmp_path):
    console = Console(file=io.StringIO(), width=400)
    result = run_learn(tmp_path, World(lesson="For {a}+{b} the result is {sum}."), PAIRS, console=console)
    assert result.status == "completed"
    assert len(result.library) == 0  # both lessons carried their problem's answer
    # the step's progress line says why nothing was learned
    assert "final 2 / rejected as leaks 2 / applied 0 (every final op was a leak" in console.file.getvalue()
    totals = result.metrics["totals"]
    assert totals["leaks_rejected"] == 2 and totals["ops_applied"] == 0 and totals["ops_rejected"] >= 2
    leaks = result.metrics["leakage"]
    assert {(r["action"], r["kind"], r["problem_id"]) for r in leaks} == {
        ("rejected", "answer", "q17_25"),
        ("rejected", "answer", "q30_41"),
    }
    assert all(r["step"] == 1 and r["op"]["option"] == "add" for r in leaks)
    assert {(r["tied"], r["tie_evidence"]) for r in leaks} == {
        ("provenance", "proposed by the group of q17_25 alone"),
        ("provenance", "proposed by the group of q30_41 alone"),
    }
    history = tmp_path / "run" / "library.history" / "ops.jsonl"  # the op log names the reason
    assert "leakage: answer of train:q17_25" in history.read_text()


RULE = "When asked for a code, multiply the key by 37, add 11 and keep the last three digits."


def test_a_general_rule_whose_number_is_another_problems_answer_is_learned_once(tmp_path):
    # Every group proposes the world's one true lesson; its 11 equals the gold of q5_6 (5+6), a coincidence:
    # the lesson came from every group, names no problem, and 11 is no specific value. The default guard
    # (reject) flags it and keeps it: the library learns the rule exactly once.
    assert LearnConfig(data="x").leakage == "reject"
    result = run_learn(tmp_path, World(lesson=RULE), [(5, 6), (17, 25), (30, 41)], batch_size=3, epochs=2)
    assert result.status == "completed"
    assert [e.text for e in result.library] == [RULE]
    leaks = result.metrics["leakage"]
    assert leaks and all(r["action"] == "flagged" and r["tied"] is None and r["problem_id"] == "q5_6" for r in leaks)
    assert result.metrics["totals"]["leaks_rejected"] == 0


def test_a_lesson_from_one_group_stating_its_answer_is_tied_by_provenance():
    checker = LeakageChecker({"train": PROBLEMS})
    (finding,) = checker.check([(None, "Count the minutes: it comes to 204.")], [{"walk"}])
    assert finding.tied == "provenance" and finding.is_leak
    (finding,) = checker.check([(None, "Count the minutes: it comes to 204.")], [{"walk", "sum"}])
    assert finding.tied is None and not finding.is_leak  # proposed by several groups: a shared rule's number
    (named,) = checker.check([(None, "For Aya's kilometer walk with the coffee shop, the total is 204.")])
    assert (named.tied, named.tie_evidence) == ("distinctive token", "the name 'aya'")
    (named,) = checker.check([(None, "Kilometer-long walks, a coffee shop afterwards: the total is 204.")])
    assert named.tied == "names the problem"


def test_learn_flag_mode_applies_and_lists(tmp_path):
    result = run_learn(tmp_path, World(lesson="For {a}+{b} the result is {sum}."), PAIRS, leakage="flag")
    assert len(result.library) == 2
    assert result.metrics["totals"]["leaks_flagged"] == 2 and result.metrics["totals"]["leaks_rejected"] == 0


def test_learn_keeps_clean_lessons_and_rejects_copies_when_asked(tmp_path):
    clean = run_learn(tmp_path / "clean", World(), PAIRS)  # "When adding A and B, check the carry."
    assert len(clean.library) == 2 and clean.metrics["leakage"] == []
    copied = run_learn(
        tmp_path / "copy", World(lesson="Recall: what is {a}+{b}? Think first."), PAIRS, leakage_copy="reject"
    )
    assert len(copied.library) == 0
    assert {r["kind"] for r in copied.metrics["leakage"]} == {"copy"}


def test_library_check_command(tmp_path):
    data = write_problems(tmp_path / "eval.jsonl", PAIRS)
    leaky = tmp_path / "leaky.json"
    Library.from_texts(["Carry carefully.", "For 17+25 the result is $\\frac{84}{2}$."]).save(leaky)
    clean = tmp_path / "clean.json"
    Library.from_texts(["Carry carefully.", "When adding 17 and 25, check the carry."]).save(clean)
    runner = CliRunner()
    found = runner.invoke(app, ["library", "check", str(leaky), "--against", str(data), "--json"])
    assert found.exit_code == 1, found.output
    rows = [json.loads(line) for line in found.stdout.splitlines()]
    assert [(r["experience_id"], r["kind"], r["problem_id"]) for r in rows] == [("G1", "answer", "q17_25")]
    passed = runner.invoke(app, ["library", "check", str(clean), "--against", str(data)])
    assert passed.exit_code == 0 and "clean" in passed.stdout


def responder(request, index):
    return "So the answer is \\boxed{42}"


def test_eval_warns_and_compare_marks_an_overlapping_library(tmp_path):
    data = write_problems(tmp_path / "eval.jsonl", PAIRS)
    leaky = tmp_path / "learn" / "library.json"
    leaky.parent.mkdir()
    Library.from_texts(["For 17+25 the result is 42."]).save(leaky)
    backend = ScriptedBackend(responder)

    def run(out: str, **settings):
        config = EvalConfig(data=str(data), out=str(tmp_path / out), samples=2, **settings)
        console = Console(file=io.StringIO(), width=400)
        client = build_client(config.llm, cache_path=f"{config.out}/cache.sqlite", backends=[backend])
        result = evaluate(config, client=client, console=console)
        return result, console.file.getvalue()

    _, base_log = run("base")
    result, log = run("lib", library=str(leaky))
    assert "warning" not in base_log
    assert "overlaps the eval set" in log and "1 experience(s) contain a gold answer" in log
    leakage = result.metrics["provenance"]["leakage"]
    assert leakage["overlaps"] and leakage["answer_leaks"] == 1
    comparison, files = compare_runs([tmp_path / "base", tmp_path / "lib"], tmp_path / "report")
    markdown = files["markdown"].read_text(encoding="utf-8")
    assert "⚠ overlaps eval set" in markdown and "not a held-out score" in markdown


@pytest.mark.parametrize(
    "config",
    [
        b"data: a.jsonl\n" + b"".join(b"k%d: &k%d [*k%d, *k%d]\n" % (i + 1, i + 1, i, i) for i in range(20)),
        b"data: caf\xe9.jsonl\n",  # not UTF-8
        b"data: a.jsonl\ndata: b.jsonl\n",  # a duplicate key
    ],
    ids=["alias-bomb", "not-utf8", "duplicate-key"],
)
def test_a_hostile_learn_config_beside_the_library_only_hides_the_learned_sets(tmp_path, config):
    """eval --library reads the learn run's config.yaml beside the library (which sets it learned on) after the
    eval's folder exists: a file it cannot trust means 'unknown sets', never a traceback mid-eval."""
    from tfgrpo.eval.library_overlap import _learn_run_sets

    (tmp_path / "config.yaml").write_bytes(config.replace(b"&k1 [*k0, *k0]", b"&k1 [x, x]"))
    assert _learn_run_sets(tmp_path / "library.json") == set()
    (tmp_path / "config.yaml").write_text("data: a.jsonl\nval_data: v.jsonl\n")
    assert _learn_run_sets(tmp_path / "library.json") == {"a.jsonl", "v.jsonl"}


def test_a_leaky_initial_library_is_reported(tmp_path):
    initial = tmp_path / "init.json"
    Library.from_texts(["The answer to 17+25 is 42."]).save(initial)
    data = write_problems(tmp_path / "train.jsonl", PAIRS)
    config = LearnConfig(
        data=str(data),
        out=str(tmp_path / "run"),
        dedup=False,
        llm={"max_retries": 0},
        group_size=2,
        epochs=1,
        init_library=str(initial),
    )
    client = build_client(
        config.llm, backends=[ScriptedBackend(World().respond)], cache_path=Path(config.out) / "cache.sqlite"
    )
    console = Console(file=io.StringIO(), width=400)
    learn(config, client=client, console=console)
    assert (
        "warning: --init-library: [G0] contains the answer of train:q17_25 (42 = gold answer 42)"
        in console.file.getvalue()
    )


def _labelled_sets():
    root = Path(__file__).parents[2]
    sets = {}
    for name, path in {"dapo100": "dapo_math_17k_first110", "aime24": "aime24", "aime25": "aime25"}.items():
        rows = [json.loads(line) for line in (root / "tfgrpo/core/data" / f"{path}.jsonl").read_text().splitlines()]
        sets[name] = [SimpleNamespace(id=str(r["id"]), problem=r["problem"], answer=r["answer"]) for r in rows]
    lessons = [json.loads(line) for line in (root / "tests/data/leakage_lessons.jsonl").read_text().splitlines()]
    return sets, lessons


def test_labelled_lessons_precision_and_recall():
    """263 labelled lessons (tests/data/leakage_lessons.md): general rules whose numbers equal some problem's
    answer are kept; real leaks are caught. Learn mode: a training problem's leak comes from its group alone."""
    sets, lessons = _labelled_sets()
    checker = LeakageChecker(sets)
    general = [row for row in lessons if row["label"] == "general"]
    leaks = [row for row in lessons if row["label"] == "leak"]
    assert len(general) >= 140 and len(leaks) >= 110 and sum(bool(r["coincides_with"]) for r in general) >= 100
    learn_sources = [
        {row["problem"].split(":", 1)[1]}
        if row["label"] == "leak" and row["problem"].startswith("dapo100:")
        else {"one-query", "another-query"}
        for row in lessons
    ]
    for sources, min_recall in ((learn_sources, 0.95), (None, 0.90)):
        findings = checker.check([(row["id"], row["text"]) for row in lessons], sources)
        rejected = {f.experience_id for f in findings if f.is_leak}
        recall = sum(row["id"] in rejected for row in leaks) / len(leaks)
        false_rate = sum(row["id"] in rejected for row in general) / len(general)
        assert recall >= min_recall and false_rate <= 0.02, (recall, false_rate)


def test_the_learn_command_says_what_tied_each_finding():
    from types import SimpleNamespace as Result

    from tfgrpo.cli.learn import _report

    console = Console(file=io.StringIO(), width=400)
    leak = {"step": 1, "action": "rejected", "kind": "answer", "source": "train", "problem_id": "SIM-5"}
    leaks = [
        {**leak, "evidence": "196 = gold answer 196", "tied": "distinctive token", "tie_evidence": "'key 5'"},
        {**leak, "evidence": "196 = gold answer 196", "tied": None, "tie_evidence": None, "action": "flagged"},
    ]
    metrics = {"leakage": [{**r, "text": "For key 5 it is 196."} for r in leaks]}
    _report(console, Result(metrics=metrics, out=Path("run"), library=Library.from_texts([])))
    printed = console.file.getvalue()
    assert "(196 = gold answer 196) [distinctive token: 'key 5']: For key 5" in printed
    assert "[coincidence]" in printed
