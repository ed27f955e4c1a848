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


def test_a_store_process_grown_past_its_bound_is_replaced_and_the_run_learns_the_same(tmp_path, monkeypatch):
    """chromadb's process grows under a run's churn: past RECYCLE_GROWTH_MB it is replaced after a step is
    written (here after every step), and the run's hints and library are those of a run that kept it."""
    from tfgrpo.experiences.store_process import StoreProcess
    from tfgrpo.learn import vector_store

    pairs = [(1, 2), (3, 4), (5, 6), (7, 8)]
    (tmp_path / "kept").mkdir()
    (tmp_path / "replaced").mkdir()
    kept, kept_backend = run_learn(tmp_path / "kept", World(), pairs, group_size=2, epochs=1, batch_size=1, dedup=True)
    started, stores = [], []
    original_init, original_close = StoreProcess.__init__, vector_store.VectorStore.close

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        started.append(self)

    def close(self):
        stores.append(self)
        original_close(self)

    monkeypatch.setattr(StoreProcess, "__init__", init)
    monkeypatch.setattr(vector_store.VectorStore, "close", close)
    monkeypatch.setattr(vector_store, "RECYCLE_GROWTH_MB", -1.0)  # always "grown": replaced after each step
    replaced, backend = run_learn(
        tmp_path / "replaced", World(), pairs, group_size=2, epochs=1, batch_size=1, dedup=True
    )
    assert replaced.status == "completed"
    assert stores[0].replacements == 3  # after steps 2-4 (after step 1 it held no library yet)
    assert len(started) == 4 and all(p._process.poll() is not None for p in started)  # none left running
    assert [e.text for e in replaced.library.experiences] == [e.text for e in kept.library.experiences]
    hints = [[m.content for m in r.messages] for r in backend.calls if r.tag == "consolidate"]
    assert hints == [[m.content for m in r.messages] for r in kept_backend.calls if r.tag == "consolidate"]


def test_the_store_is_one_thread_and_its_process_ends_with_close(tmp_path):
    """Store calls run in order on one thread named for it; `close` waits for the call under way and ends the
    store's process."""
    import asyncio
    import threading

    from tfgrpo.experiences.model import Experience, Library
    from tfgrpo.learn.vector_store import VectorStore

    store = VectorStore(tmp_path / "store")
    library = Library(experiences=[Experience(id="G0", text="Check the carry when adding two numbers.")])

    async def scenario():
        threads = await asyncio.gather(*(store.call(lambda: threading.current_thread().name) for _ in range(3)))
        hints = await store.near_duplicates(library, ["When adding two numbers, check the carry."], 0.5)
        return set(threads), hints

    threads, hints = asyncio.run(scenario())
    process = store._process
    store.close()
    assert len(threads) == 1 and next(iter(threads)).startswith("vector-store")
    assert [h.id for h in hints] == ["G0"]
    assert (tmp_path / "store").is_dir()
    assert process is not None and process._process.returncode == 0
    with pytest.raises(RuntimeError):  # no call is taken once closed
        asyncio.run(store.call(len, []))
