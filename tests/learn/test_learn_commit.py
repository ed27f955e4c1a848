"""A finished step is written to the run directory when it ends, before the next step sends anything: steps
are on disk in order, and a write that fails stops the run with its own error before it pays for more."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from tests.helpers.learn_world import World, read_jsonl, write_problems
from tfgrpo.learn.config import LearnConfig
from tfgrpo.learn.loop import learn
from tfgrpo.learn.rundir import RunDir
from tfgrpo.llm.backends.scripted import ScriptedBackend
from tfgrpo.llm.factory import build_client
from tfgrpo.llm.types import ChatRequest, Completion

pytestmark = pytest.mark.timeout(120)

PAIRS = [(1, 2), (3, 4), (5, 6), (7, 8)]
LESSON = "check the carry"  # in every lesson the world's group analyses propose


def completed_on_disk(out: Path) -> int:
    state = out / "state.json"
    return json.loads(state.read_text(encoding="utf-8"))["completed_step"] if state.is_file() else -1


class DiskWatchingBackend(ScriptedBackend):
    """Notes, for every rollout request sent with a library in its prompt, the step completed on disk when the
    request was sent and when its reply came back (after `latency_s`)."""

    def __init__(self, world: World, out: Path, latency_s: float):
        super().__init__(world.respond, latency_s=latency_s)
        self.out = out
        self.seen: list[tuple[int, int]] = []

    async def forward(self, request: ChatRequest) -> list[Completion]:
        prompt = "\n".join(m.content or "" for m in request.messages)
        sent = completed_on_disk(self.out)
        completions = await super().forward(request)
        if request.tag == "rollout" and LESSON in prompt:
            self.seen.append((sent, completed_on_disk(self.out)))
        return completions


def make_config(tmp_path: Path, **overrides) -> LearnConfig:
    data = write_problems(tmp_path / "train.jsonl", PAIRS)
    settings = {"group_size": 2, "epochs": 1, "batch_size": 2, "dedup": False, "llm": {"max_retries": 0}}
    return LearnConfig(data=str(data), out=str(tmp_path / "run"), **{**settings, **overrides})


def run_with(config: LearnConfig, backend: ScriptedBackend):
    client = build_client(config.llm, backends=[backend], cache_path=Path(config.out) / "cache.sqlite")
    return learn(config, client=client, console=Console(file=io.StringIO()))


def test_a_step_is_on_disk_before_the_next_step_sends_its_rollouts(tmp_path):
    config = make_config(tmp_path)
    backend = DiskWatchingBackend(World(), Path(config.out), latency_s=0.05)
    result = run_with(config, backend)
    assert result.status == "completed"
    # step 2's rollouts (the only ones with lessons in their prompt) all left with step 1 on disk
    assert backend.seen, "no rollout was sent with a library"
    assert all(sent == 1 and after == 1 for sent, after in backend.seen)
    steps = [row["step"] for row in read_jsonl(Path(config.out) / "rollouts.jsonl")]
    assert steps == sorted(steps) and set(steps) == {1, 2}
    assert completed_on_disk(Path(config.out)) == 2
    assert [s["step"] for s in result.metrics["steps"]] == [1, 2]


def test_a_failed_write_stops_the_run_with_its_error(tmp_path, monkeypatch):
    config = make_config(tmp_path)
    write = RunDir.write_step

    def disk_full(self, state, *, step, **kwargs):
        if step == 1:
            raise OSError(28, "No space left on device")
        return write(self, state, step=step, **kwargs)

    monkeypatch.setattr(RunDir, "write_step", disk_full)
    world = World()
    with pytest.raises(OSError, match="No space left"):
        run_with(config, ScriptedBackend(world.respond, latency_s=0.05))
    assert completed_on_disk(Path(config.out)) == 0
    # the run stopped at step 1's end: nothing of step 2 was asked for
    tags = [r.tag for r in world.requests]
    assert tags.count("consolidate") == 1 and tags[-1] == "consolidate"
    state = json.loads((Path(config.out) / "state.json").read_text(encoding="utf-8"))
    assert state["sessions"][-1]["status"] == "failed"


def test_an_epochs_end_is_saved_with_its_last_step(tmp_path):
    config = make_config(tmp_path, epochs=2, batch_size=4)  # one step per epoch: step 1 ends epoch 1
    backend = DiskWatchingBackend(World(), Path(config.out), latency_s=0.05)
    result = run_with(config, backend)
    assert result.status == "completed"
    assert backend.seen and all(sent == 1 for sent, _ in backend.seen)  # epoch 2 began with epoch 1 on disk
    state = json.loads((Path(config.out) / "state.json").read_text(encoding="utf-8"))
    assert state["completed_step"] == 2
    assert state["epoch_end_step"] == {"1": 1, "2": 2}
