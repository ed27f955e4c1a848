"""The leakage guard's index of the run's problems is built in the first wave's network wait, on a thread of its
own, not before the run's first request (tfgrpo.learn.guards.LeakageGuard), and it still screens the first step."""

from __future__ import annotations

import io
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console

from tests.helpers.learn_world import World, write_problems
from tfgrpo.core.datasets import Problem
from tfgrpo.experiences.model import Experience, Library
from tfgrpo.learn import guards
from tfgrpo.learn.config import LearnConfig
from tfgrpo.learn.loop import learn
from tfgrpo.llm.backends.scripted import ScriptedBackend
from tfgrpo.llm.factory import build_client
from tfgrpo.llm.types import ChatRequest, Completion

pytestmark = pytest.mark.timeout(120)


class FirstCallBackend(ScriptedBackend):
    """Remembers when its first request arrived."""

    first_call: float | None = None

    async def forward(self, request: ChatRequest) -> list[Completion]:
        if self.first_call is None:
            self.first_call = time.perf_counter()
        return await super().forward(request)


@pytest.fixture
def builds(monkeypatch) -> list[tuple[float, str]]:
    """(when, on which thread) of every index the guard builds."""
    built: list[tuple[float, str]] = []
    real = guards.LeakageChecker

    def recording(*args, **kwargs):
        checker = real(*args, **kwargs)
        built.append((time.perf_counter(), threading.current_thread().name))
        return checker

    monkeypatch.setattr(guards, "LeakageChecker", recording)
    return built


def test_the_index_is_built_once_on_first_use_and_screens_the_first_step(tmp_path: Path, builds):
    world = World(lesson="For {a}+{b} the result is {sum}.")  # every proposed lesson states its gold answer
    backend = FirstCallBackend(world.respond, latency_s=0.05)
    data = write_problems(tmp_path / "train.jsonl", [(12, 19), (23, 38)])
    config = LearnConfig(
        data=str(data), out=str(tmp_path / "run"), group_size=2, epochs=1, batch_size=2, dedup=False,
        llm={"max_retries": 0},
    )  # fmt: skip
    client = build_client(config.llm, backends=[backend], cache_path=tmp_path / "run" / "cache.sqlite")
    result = learn(config, client=client, console=Console(file=io.StringIO()))

    assert result.status == "completed"
    ((built_at, _),) = builds  # one index for the run, built when the first consolidation needs it
    assert backend.first_call is not None and built_at > backend.first_call
    # and it screened the step: both lessons name their problem's answer and were rejected
    assert {f["action"] for f in result.metrics["leakage"]} == {"rejected"}
    assert len(result.metrics["leakage"]) == 2
    assert not any("the result is" in e.text for e in result.library.experiences)


def guard_for(problems: list[Problem]) -> guards.LeakageGuard:
    config = LearnConfig(data="unused.jsonl")
    return guards.LeakageGuard(config, {"train": problems})


PROBLEMS = [Problem(id="q1", problem="What is 123+456?", answer="579")]


def test_an_empty_starting_library_needs_no_index_and_a_given_one_is_checked(builds):
    guard = guard_for(PROBLEMS)
    assert guard.initial_warnings(Library()) == [] and builds == []
    leaky = Library(experiences=[Experience(id="G0", text="For 123+456 the sum is 579.")])
    (warning,) = guard.initial_warnings(leaky)
    assert "--init-library" in warning and "579" in warning
    assert len(builds) == 1


def test_the_index_is_built_once_and_a_failed_build_is_raised_at_each_use(monkeypatch):
    guard = guard_for(PROBLEMS)
    checker = guard.checker
    assert guard.checker is checker

    failing = guard_for(PROBLEMS)
    monkeypatch.setattr(failing, "_build", lambda: (_ for _ in ()).throw(RuntimeError("index failed")))
    for _ in range(2):
        with pytest.raises(RuntimeError, match="index failed"):
            _ = failing.checker
