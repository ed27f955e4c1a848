"""Resume: after a crash, Ctrl-C or the budget stop, `--resume` pays for nothing twice and ends with the
library (and logs) of an uninterrupted run with the same seed."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from tests.helpers.learn_world import SimulatedCrash, World, read_jsonl, write_problems
from tfgrpo.core.config import ConfigError
from tfgrpo.learn.config import LearnConfig
from tfgrpo.learn.loop import learn
from tfgrpo.llm.backends.scripted import ScriptedBackend
from tfgrpo.llm.factory import build_client

pytestmark = pytest.mark.timeout(120)

PAIRS = [(1, 2), (3, 4), (5, 6), (7, 8), (1, 1)]
SETTINGS = {"group_size": 3, "epochs": 2, "batch_size": 2, "dedup": False}


def make_config(root: Path, **overrides) -> LearnConfig:
    root.parent.mkdir(parents=True, exist_ok=True)
    data = write_problems(root.parent / "train.jsonl", PAIRS)
    llm = {"max_retries": 0, **overrides.pop("llm", {})}
    return LearnConfig(data=str(data), out=str(root), llm=llm, **{**SETTINGS, **overrides})


def run(config: LearnConfig, world: World):
    client = build_client(
        config.llm, backends=[ScriptedBackend(world.respond)], cache_path=Path(config.out) / "cache.sqlite"
    )
    return learn(config, client=client, console=Console(file=io.StringIO()))


def comparable_rows(out: Path) -> list[tuple]:
    return [
        (r["step"], r["query_id"], r["sample"], r["completion"], r["reward"], r["library_version"])
        for r in read_jsonl(out / "rollouts.jsonl")
    ]


def stage_rows(out: Path, name: str) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "cached"} for r in read_jsonl(out / "stages" / f"{name}.jsonl")]


@pytest.fixture
def reference(tmp_path):
    """An uninterrupted run with the same seed."""
    config = make_config(tmp_path / "ref" / "run")
    world = World()
    result = run(config, world)
    assert result.status == "completed"
    return result, world, Path(config.out)


def assert_same_run(out: Path, reference_out: Path, library, reference_library) -> None:
    assert library.model_dump() == reference_library.model_dump()
    assert comparable_rows(out) == comparable_rows(reference_out)
    for name in ("summaries", "group_ops", "consolidation"):
        assert stage_rows(out, name) == stage_rows(reference_out, name)
    # the library's own op log: no record lost or written twice by the interruption
    assert history_rows(out) == history_rows(reference_out)
    assert any(r["kind"] == "applied" for r in history_rows(out))


def history_rows(out: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "time"} for r in read_jsonl(out / "library.history" / "ops.jsonl")]


def assert_nothing_paid_twice(first: World, second: World) -> None:
    asked_again = {
        r.sample_key("scripted", i) for r in second.requests for i in range(r.sample_offset, r.sample_offset + r.n)
    }
    assert not asked_again & set(first.answered)


@pytest.mark.parametrize("crash_at", [7, 40])
def test_resume_after_a_crash(tmp_path, reference, crash_at):
    ref_result, ref_world, ref_out = reference
    config = make_config(tmp_path / "crash" / "run")
    first = World(crash_at=crash_at)
    with pytest.raises(SimulatedCrash):
        run(config, first)
    assert 0 < len(first.answered) < len(ref_world.answered)

    second = World()
    result = run(config.model_copy(update={"resume": True}), second)
    assert result.status == "completed"
    assert_nothing_paid_twice(first, second)
    assert set(first.answered) | set(second.answered) == set(ref_world.answered)
    assert len(first.answered) + len(second.answered) == len(ref_world.answered)  # no sample paid twice, in any run
    assert_same_run(Path(config.out), ref_out, result.library, ref_result.library)
    assert [s["status"] for s in result.metrics["sessions"]] == ["failed", "completed"]


def test_resume_after_ctrl_c(tmp_path, reference):
    ref_result, ref_world, ref_out = reference
    config = make_config(tmp_path / "int" / "run")
    first = World(interrupt_at=25)
    interrupted = run(config, first)
    assert interrupted.status == "interrupted"
    assert "--resume" in interrupted.resume_command

    second = World()
    result = run(config.model_copy(update={"resume": True}), second)
    assert result.status == "completed"
    assert_nothing_paid_twice(first, second)
    assert_same_run(Path(config.out), ref_out, result.library, ref_result.library)


def test_budget_stops_cleanly_and_the_run_resumes(tmp_path, reference):
    ref_result, ref_world, ref_out = reference
    prices = {"price_input_per_1m": 0.0, "price_output_per_1m": 1000.0}  # $0.001 per completion word
    config = make_config(tmp_path / "budget" / "run", llm={**prices, "budget_usd": 0.05})
    first = World()
    stopped = run(config, first)
    assert stopped.status == "budget_exceeded" and "budget" in stopped.message
    assert 0 < len(first.answered) < len(ref_world.answered)
    spent = stopped.metrics["totals"]["cost_usd"]
    assert spent >= 0.05

    # same budget: nothing left to spend, so it stops again at once without a single call
    again = World()
    assert run(config.model_copy(update={"resume": True}), again).status == "budget_exceeded"
    assert again.requests == []

    second = World()
    raised = config.model_copy(update={"resume": True, "llm": config.llm.model_copy(update={"budget_usd": 100.0})})
    result = run(raised, second)
    assert result.status == "completed"
    assert_nothing_paid_twice(first, second)
    assert_same_run(Path(config.out), ref_out, result.library, ref_result.library)
    sessions = result.metrics["sessions"]
    assert [s["status"] for s in sessions] == ["budget_exceeded", "budget_exceeded", "completed"]
    assert sessions[1]["cost_usd"] == 0.0
    assert result.metrics["totals"]["cost_usd"] == pytest.approx(spent + sessions[2]["cost_usd"])


def test_resume_refuses_changed_settings_and_fresh_runs_refuse_to_overwrite(tmp_path):
    config = make_config(tmp_path / "x" / "run", epochs=1)
    assert run(config, World()).status == "completed"
    with pytest.raises(ConfigError, match="--resume"):
        run(config, World())
    with pytest.raises(ConfigError, match="group_size"):
        run(config.model_copy(update={"resume": True, "group_size": 4}), World())
    with pytest.raises(ConfigError, match="nothing to resume"):
        run(make_config(tmp_path / "y" / "run", resume=True), World())


def test_more_epochs_on_resume_extend_a_finished_run(tmp_path, reference):
    ref_result, ref_world, ref_out = reference
    config = make_config(tmp_path / "ext" / "run", epochs=1)
    first = World()
    assert run(config, first).status == "completed"
    second = World()
    result = run(config.model_copy(update={"resume": True, "epochs": 2}), second)
    assert result.status == "completed"
    assert_nothing_paid_twice(first, second)
    assert_same_run(Path(config.out), ref_out, result.library, ref_result.library)


def test_resume_with_vector_store_dedup_on(tmp_path):
    """With the default chromadb dedup (near-duplicates shown to consolidation), a resumed run still ends
    with the reference run's library, logs and op log, paying for nothing twice."""
    ref_config = make_config(tmp_path / "ref" / "run", dedup=True)
    ref_world = World()
    reference = run(ref_config, ref_world)
    assert reference.status == "completed"

    config = make_config(tmp_path / "crash" / "run", dedup=True)
    first = World(crash_at=40)
    with pytest.raises(SimulatedCrash):
        run(config, first)
    second = World()
    result = run(config.model_copy(update={"resume": True}), second)
    assert result.status == "completed"
    assert_nothing_paid_twice(first, second)
    assert len(first.answered) + len(second.answered) == len(ref_world.answered)
    assert_same_run(Path(config.out), Path(ref_config.out), result.library, reference.library)
