"""A finished step is written to the run directory in the next step's network wait (tfgrpo.learn.commit):
the next step's first requests do not wait for the disk, the step is on disk before their replies arrive,
steps are written in order, and a write that fails stops the run with its own error."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from tests.helpers.learn_world import World, read_jsonl, write_problems
from tfgrpo.learn.commit import StepCommits
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


def test_a_step_is_written_while_the_next_steps_rollouts_are_out(tmp_path):
    config = make_config(tmp_path)
    backend = DiskWatchingBackend(World(), Path(config.out), latency_s=0.2)
    result = run_with(config, backend)
    assert result.status == "completed"
    # step 2's rollouts (the only ones with lessons in their prompt) left before step 1 was on disk, and every
    # one of their replies found it written
    assert backend.seen, "no rollout was sent with a library"
    assert backend.seen[0][0] == 0
    assert all(after == 1 for _, after in backend.seen)
    # and the run directory is the one a step-by-step writer leaves: both steps, in order
    steps = [row["step"] for row in read_jsonl(Path(config.out) / "rollouts.jsonl")]
    assert steps == sorted(steps) and set(steps) == {1, 2}
    assert completed_on_disk(Path(config.out)) == 2
    assert [s["step"] for s in result.metrics["steps"]] == [1, 2]


def test_a_failed_write_stops_the_run_with_its_error(tmp_path, monkeypatch):
    config = make_config(tmp_path)
    write = RunDir.commit_step

    def disk_full(self, state, *, step, **kwargs):
        if step == 1:
            raise OSError(28, "No space left on device")
        return write(self, state, step=step, **kwargs)

    monkeypatch.setattr(RunDir, "commit_step", disk_full)
    world = World()
    with pytest.raises(OSError, match="No space left"):
        run_with(config, ScriptedBackend(world.respond, latency_s=0.05))
    assert completed_on_disk(Path(config.out)) == 0
    # the run stopped in step 2's rollouts: step 2 asked for no summary, analysis or consolidation
    tags = [r.tag for r in world.requests]
    last_consolidation = max(i for i, tag in enumerate(tags) if tag == "consolidate")
    assert tags.count("consolidate") == 1
    assert set(tags[last_consolidation + 1 :]) == {"rollout"}
    state = json.loads((Path(config.out) / "state.json").read_text(encoding="utf-8"))
    assert state["sessions"][-1]["status"] == "failed"


def test_step_commits_write_in_order_once_each_and_raise_what_failed():
    commits, written = StepCommits(), []
    commits.hold(lambda: written.append(1))
    commits.hold(lambda: written.append(2))  # the held one first
    assert written == [1]
    commits.flush()
    commits.flush()
    assert written == [1, 2]

    def failing() -> None:
        raise OSError("disk gone")

    commits.hold(failing)
    with pytest.raises(OSError, match="disk gone"):
        commits.flush()
    # and again at every later flush or hold, the next step not written: the run directory keeps no gap
    with pytest.raises(OSError, match="disk gone"):
        commits.flush()
    with pytest.raises(OSError, match="disk gone"):
        commits.hold(lambda: written.append(3))
    commits._write_quietly()
    assert written == [1, 2]


def test_a_held_step_is_written_in_the_waves_wait_and_by_its_end_at_the_latest():
    async def scenario() -> tuple[list[str], list[str]]:
        commits, idle_order, busy_order = StepCommits(), [], []
        commits.hold(lambda: idle_order.append("written"))
        with commits.written_in_wait():
            await asyncio.sleep(0.05)  # the wave's network wait: the loop is idle
            idle_order.append("replies")
        commits.hold(lambda: busy_order.append("written"))
        with commits.written_in_wait():
            busy_order.append("replies")  # no wait at all: written when the block ends
        busy_order.append("after")
        return idle_order, busy_order

    idle_order, busy_order = asyncio.run(scenario())
    assert idle_order == ["written", "replies"]
    assert busy_order == ["replies", "written", "after"]


def test_an_epochs_last_step_without_validation_is_written_in_the_next_epochs_first_wave(tmp_path):
    config = make_config(tmp_path, epochs=2, batch_size=4)  # one step per epoch: step 1 ends epoch 1
    backend = DiskWatchingBackend(World(), Path(config.out), latency_s=0.2)
    result = run_with(config, backend)
    assert result.status == "completed"
    assert backend.seen and backend.seen[0][0] == 0  # epoch 2's rollouts left before epoch 1 was on disk
    assert all(after == 1 for _, after in backend.seen)
    state = json.loads((Path(config.out) / "state.json").read_text(encoding="utf-8"))
    assert state["completed_step"] == 2
    assert state["epoch_end_step"] == {"1": 1, "2": 2}  # saved with the held steps
