"""The vector store in the learn loop: opened when a step first needs it, then used for dedup hints and
top-k injection from its own thread."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from tests.helpers.learn_world import World, write_problems
from tfgrpo.learn.config import LearnConfig
from tfgrpo.learn.loop import learn
from tfgrpo.llm.backends.scripted import ScriptedBackend
from tfgrpo.llm.factory import build_client

pytestmark = pytest.mark.timeout(180)


def run_learn(tmp_path: Path, world: World, pairs: list[tuple[int, int]], latency_s: float = 0.0, **settings):
    data = write_problems(tmp_path / "train.jsonl", pairs)
    config = LearnConfig(data=str(data), out=str(tmp_path / "run"), llm={"max_retries": 0}, **settings)
    backend = ScriptedBackend(world.respond, latency_s=latency_s)
    client = build_client(config.llm, backends=[backend], cache_path=Path(config.out) / "cache.sqlite")
    return learn(config, client=client, console=Console(file=io.StringIO())), backend


def rollout_requests(backend: ScriptedBackend):
    return [r for r in backend.calls if r.tag == "rollout"]


def test_dedup_hints_and_topk_injection_come_from_the_background_store(tmp_path):
    result, backend = run_learn(
        tmp_path, World(), [(1, 2), (3, 4), (5, 6)], group_size=2, epochs=1, batch_size=1, dedup=True, inject="topk:1"
    )
    assert result.status == "completed" and len(result.library) == 3
    consolidations = [r for r in backend.calls if r.tag == "consolidate"]
    # steps 2 and 3 propose a lesson close to one already learned ("When adding A and B, check the carry.")
    assert ["<possible_duplicates>" in r.messages[0].content for r in consolidations] == [False, True, True]
    later = [r for r in rollout_requests(backend) if r.messages[0].role == "system"]
    assert later and all(len(re.findall(r"\[G\d+\]", r.messages[0].content)) == 1 for r in later)  # top-1 only
    assert (tmp_path / "run" / "store").is_dir()


def test_a_one_step_run_from_scratch_never_opens_the_store(tmp_path):
    result, _ = run_learn(tmp_path, World(), [(1, 2), (3, 4)], group_size=2, epochs=1, dedup=True)
    assert result.status == "completed" and len(result.library) == 2
    assert not (tmp_path / "run" / "store").exists()


def test_the_store_is_one_thread_in_this_process_and_closes_with_the_engine(tmp_path):
    """Store calls run in order on one thread named for it; closing waits for the call under way."""
    import asyncio
    import threading

    from experiences.model import Experience, Library
    from tfgrpo.learn.vector_store import VectorStore

    store = VectorStore(tmp_path / "store")
    library = Library(experiences=[Experience(id="G0", text="Check the carry when adding two numbers.")])

    async def scenario():
        threads = await asyncio.gather(*(store.call(lambda: threading.current_thread().name) for _ in range(3)))
        hints = await store.near_duplicates(library, ["When adding two numbers, check the carry."], 0.5)
        return set(threads), hints

    threads, hints = asyncio.run(scenario())
    store.close()
    assert len(threads) == 1 and next(iter(threads)).startswith("vector-store")
    assert [h.id for h in hints] == ["G0"]
    assert (tmp_path / "store").is_dir()
    with pytest.raises(RuntimeError):  # no call is taken once closed
        asyncio.run(store.call(len, []))
