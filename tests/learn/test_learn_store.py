"""The vector store in the learn loop: opened in the background only when a step can use it, then used
for dedup hints and top-k injection from its own thread. Like the math verifier's workers, its cold start
begins while the first rollouts are on the wire."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from rewards.math import MathReward
from tests.helpers.learn_world import World, write_problems
from tfgrpo.learn.config import LearnConfig
from tfgrpo.learn.loop import learn
from tfgrpo.learn.store_worker import StoreWorker
from tfgrpo.llm.backends.scripted import ScriptedBackend
from tfgrpo.llm.factory import build_client

pytestmark = pytest.mark.timeout(180)


def run_learn(tmp_path: Path, world: World, pairs: list[tuple[int, int]], latency_s: float = 0.0, **settings):
    data = write_problems(tmp_path / "train.jsonl", pairs)
    config = LearnConfig(data=str(data), out=str(tmp_path / "run"), llm={"max_retries": 0}, **settings)
    backend = ScriptedBackend(world.respond, latency_s=latency_s)
    client = build_client(config.llm, backends=[backend], cache_path=Path(config.out) / "cache.sqlite")
    return learn(config, client=client, console=Console(file=io.StringIO())), backend


class CountingWorld(World):
    """Counts the replies it has produced (the scripted backend asks for one when its latency has passed)."""

    replies = 0

    def respond(self, request, index):
        self.replies += 1
        return super().respond(request, index)


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


def test_the_store_starts_loading_while_the_first_wave_is_on_the_wire(tmp_path, monkeypatch):
    """Its cold start uses the network wait of step 1's rollouts, before any reply is produced (not after the
    first group returns, where its imports would compete with the replies for the GIL)."""
    world, replies_at_start = CountingWorld(), []
    original_start = StoreWorker.start

    def start(self: StoreWorker) -> None:
        if self._future is None:
            replies_at_start.append(world.replies)
        original_start(self)

    monkeypatch.setattr(StoreWorker, "start", start)
    result, _ = run_learn(tmp_path, world, [(1, 2), (3, 4)], latency_s=0.3, group_size=2, batch_size=1, dedup=True)
    assert result.status == "completed"
    assert replies_at_start == [0]


def test_the_reward_warms_up_with_the_steps_golds_while_the_wave_is_on_the_wire(tmp_path, monkeypatch):
    world, warmed = CountingWorld(), []
    monkeypatch.setattr(MathReward, "warm_up", lambda self, golds: warmed.append((world.replies, list(golds))))
    result, _ = run_learn(tmp_path, world, [(1, 2), (3, 4)], latency_s=0.3, group_size=2, batch_size=1, epochs=1)
    assert result.status == "completed"
    assert sorted(golds for _, golds in warmed) == [["3"], ["7"]]  # each step's golds
    assert warmed[0][0] == 0  # the first step's, before any reply


def test_each_committed_library_reaches_the_store_while_the_next_steps_requests_are_out(tmp_path, monkeypatch):
    """After a step commits, its library is sent to the store's process at once (it embeds the new lessons
    on its own core during the next step's network wait), not when the next consolidation asks for hints."""
    from experiences.store_process import StoreProcess
    from tfgrpo.learn.rundir import RunDir

    world, commits, sent = CountingWorld(), [], []
    original_commit, original_call = RunDir.commit_step, StoreProcess._call

    def commit_step(self, state, *, step, library, **rest):
        original_commit(self, state, step=step, library=library, **rest)
        commits.append((world.replies, sorted(e.id for e in library.experiences)))

    def call(self, name, *args, **kwargs):
        if name == "sync":
            sent.append((world.replies, sorted(e.id for e in args[0].experiences)))
        return original_call(self, name, *args, **kwargs)

    monkeypatch.setattr(RunDir, "commit_step", commit_step)
    monkeypatch.setattr(StoreProcess, "_call", call)
    result, backend = run_learn(
        tmp_path, world, [(1, 2), (3, 4)], latency_s=0.5, group_size=2, epochs=1, batch_size=1, dedup=True
    )
    assert result.status == "completed" and len(commits) == 2
    replies_at_commit, step_one_ids = commits[0]
    assert step_one_ids, "step 1 learned nothing to send"
    first_send = next(replies for replies, ids in sent if ids == step_one_ids)
    # step 2's replies: 2 rollouts, 2 summaries, then its group analysis, whose reply the hints wait for
    assert first_send < replies_at_commit + 5, (first_send, replies_at_commit, sent)
    assert first_send <= replies_at_commit + 2  # sent while step 2's rollouts were on the wire (or just after)


def test_a_store_process_grown_past_its_bound_is_replaced_and_the_run_learns_the_same(tmp_path, monkeypatch):
    """chromadb's process grows under a run's churn: past RECYCLE_GROWTH_MB it is replaced after a commit (here
    after every step), and the run's dedup decisions, hints and library are those of a run that kept it."""
    import tfgrpo.learn.store_worker as store_worker
    from experiences.store_process import StoreProcess

    pairs = [(1, 2), (3, 4), (5, 6), (7, 8)]
    (tmp_path / "kept").mkdir()
    (tmp_path / "replaced").mkdir()
    kept, kept_backend = run_learn(tmp_path / "kept", World(), pairs, group_size=2, epochs=1, batch_size=1, dedup=True)
    started, workers = [], []
    original_init, original_close = StoreProcess.__init__, store_worker.StoreWorker.close

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        started.append(self)

    def close(self):
        workers.append(self)
        original_close(self)

    monkeypatch.setattr(StoreProcess, "__init__", init)
    monkeypatch.setattr(store_worker.StoreWorker, "close", close)
    monkeypatch.setattr(store_worker, "RECYCLE_GROWTH_MB", -1.0)  # always "grown": replaced after each commit
    replaced, backend = run_learn(
        tmp_path / "replaced", World(), pairs, group_size=2, epochs=1, batch_size=1, dedup=True
    )
    assert replaced.status == "completed"
    assert workers[0].replacements == 3  # after the commits of steps 1-3 (none after the last)
    assert len(started) == 4 and all(p._process.poll() is not None for p in started)  # none left running
    assert [e.text for e in replaced.library.experiences] == [e.text for e in kept.library.experiences]
    hints = [[m.content for m in r.messages] for r in backend.calls if r.tag == "consolidate"]
    assert hints == [[m.content for m in r.messages] for r in kept_backend.calls if r.tag == "consolidate"]


def test_release_takes_no_new_call_and_close_waits_for_the_process(tmp_path):
    """`release` (the run's end: the store's exit overlaps the last writes) lets a running call finish, takes no
    new one, and `close` returns once the process has exited."""
    from experiences.model import Experience, Library

    worker = StoreWorker(tmp_path / "store")
    worker.start()
    assert worker._future is not None
    process = worker._future.result(timeout=60)
    worker.sync_ahead(Library(experiences=[Experience(id="G0", text="Check the carry when adding.")]))
    worker.release()
    worker.release()  # twice is harmless
    worker.close()
    assert process._process.returncode == 0
    with pytest.raises(RuntimeError):  # no call is taken once released
        worker.sync_ahead(Library())
