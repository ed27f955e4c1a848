"""Selection on validation: per-step choice, the noise gate (rejects a harmful step, keeps a neutral one),
and the Pareto view of candidate libraries."""

from __future__ import annotations

import pytest

from tests.helpers.trust_worlds import HARMFUL, gated_learn_report, run_learn
from tfgrpo.core.config import ConfigError, build_config
from tfgrpo.experiences import Library
from tfgrpo.learn.config import LearnConfig
from tfgrpo.learn.selection import gate_decision, pareto_view

pytestmark = pytest.mark.timeout(180)


def test_gate_rejects_the_harmful_step_and_keeps_the_neutral_one(tmp_path):
    result = run_learn(tmp_path, gate=True)
    assert result.status == "completed"
    assert [e.text for e in result.library] == ["When adding 17 and 25, check the carry."]
    decisions = {s["gate"]["decision"]: s for s in result.metrics["steps"]}
    assert set(decisions) == {"kept", "rejected"}
    harmful = decisions["rejected"]
    assert harmful["gate"]["diff"] == pytest.approx(-0.5) and harmful["gate"]["ci95"][1] < 0
    assert harmful["val_mean_at_k"] == pytest.approx(0.0)
    after_harmful = Library.load(tmp_path / "run" / "steps" / f"{harmful['step']:04d}" / "library.json")
    assert all(HARMFUL not in e.text for e in after_harmful)  # the step's library is the one before it
    neutral = decisions["kept"]
    assert neutral["gate"]["diff"] == pytest.approx(0.0) and neutral["gate"]["ci95"] == [0.0, 0.0]
    assert result.metrics["gate"] == {"kept": 1, "rejected": 1}
    ops_log = (tmp_path / "run" / "library.history" / "ops.jsonl").read_text()
    assert "gate: validation dropped beyond noise" in ops_log
    # the Pareto view: the starting library and both candidates, the harmful one dominated
    pareto = {row["candidate"]: row for row in result.metrics["pareto"]}
    rejected_name = f"step {harmful['step']}"
    assert set(pareto) == {"step 0", "step 1", "step 2"}
    assert not pareto[rejected_name]["on_front"] and pareto[rejected_name]["mean"] == 0.0
    assert pareto[f"step {neutral['step']}"]["on_front"]


def test_select_by_step_validates_every_step_and_picks_the_best(tmp_path):
    result = run_learn(tmp_path, select_by="step")
    validated = {v["step"]: v["mean_at_k"] for v in result.metrics["step_validation"]}
    assert set(validated) == {1, 2}
    best = result.metrics["best_step"]
    assert validated[best] == max(validated.values())
    assert (
        result.library.model_dump()["experiences"]
        == Library.load(tmp_path / "run" / "steps" / f"{best:04d}" / "library.json").model_dump()["experiences"]
    )
    assert all(s["val_mean_at_k"] is not None for s in result.metrics["steps"])


def test_gate_and_step_selection_need_validation_data(tmp_path):
    with pytest.raises(ConfigError, match="add it"):
        build_config(LearnConfig, None, {"data": "easy", "gate": True})


def test_gate_decision_and_pareto_units():
    before = {f"p{i}": 0.5 for i in range(8)}
    noisy = {**before, "p0": 0.25, "p1": 0.75}  # one down, one up: noise
    assert gate_decision(before, noisy, seed=0)["decision"] == "kept"
    worse = {k: v - 0.25 for k, v in before.items()}
    assert gate_decision(before, worse, seed=0)["decision"] == "rejected"
    rows = {
        r["candidate"]: r
        for r in pareto_view({"a": {"x": 1.0, "y": 0.0}, "b": {"x": 0.0, "y": 1.0}, "c": {"x": 0.0, "y": 0.5}})
    }
    assert rows["a"]["on_front"] and rows["b"]["on_front"] and not rows["c"]["on_front"]
    assert rows["c"]["dominated_by"] == ["b"] and rows["a"]["best_on"] == 1


def test_compare_report_shows_the_pareto_view_and_gate(tmp_path):
    _comparison, files = gated_learn_report(tmp_path)
    markdown = files["markdown"].read_text()
    assert "Candidate libraries on validation (Pareto view)" in markdown
    assert "1 step(s) kept, 1 rejected" in markdown
    html = files["html"].read_text()
    assert "Pareto view" in html and "step 0" in html
