"""A learn run on the scripted backend, in process: the engine tests' one way to run the loop."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from tests.helpers.learn_world import World, write_problems
from tfgrpo.learn.config import LearnConfig
from tfgrpo.learn.loop import learn
from tfgrpo.llm.backends.scripted import ScriptedBackend
from tfgrpo.llm.factory import build_client


def run_learn(tmp_path: Path, world: World, pairs: list[tuple[int, int]], **settings):
    data = write_problems(tmp_path / "train.jsonl", pairs, answers=settings.pop("answers", None))
    llm = {"max_retries": 0, **settings.pop("llm", {})}
    config = LearnConfig(data=str(data), out=str(tmp_path / "run"), dedup=False, llm=llm, **settings)
    backend = ScriptedBackend(world.respond)
    client = build_client(config.llm, backends=[backend], cache_path=Path(config.out) / "cache.sqlite")
    result = learn(config, client=client, console=Console(file=io.StringIO()))
    return result, backend, config


def rollout_requests(backend: ScriptedBackend):
    return [r for r in backend.calls if r.tag == "rollout"]
