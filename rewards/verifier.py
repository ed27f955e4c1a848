"""A pool of killable worker processes that run math-verify under a hard deadline.

Why processes: sympy can run for minutes (or forever) on a hostile answer such as `9^{9^{9^{9^9}}}`, and
math-verify's own timeout (`signal.alarm`) only works in the main thread, so it cannot protect a reward
called from a thread or an asyncio loop. Here each comparison runs in a worker; when its deadline passes
the worker is killed (SIGKILL works whatever sympy is doing) and a replacement forks in ~10 ms from a
zygote process that has already imported sympy (see `tfgrpo.rewards._verify_worker`). A batch is spread over
all workers, so the pool also uses every core. POSIX only (fork, SCM_RIGHTS).

Thread-safe: each call checks workers out of a shared queue, so concurrent callers never share a pipe.
"""

from __future__ import annotations

import os
import queue
import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any, NamedTuple

from tfgrpo.rewards.errors import RewardError
from tfgrpo.rewards.verify_processes import WorkerProcess, Zygote


class Verdict(NamedTuple):
    """equal=None: the gold answer is unusable, so the pair cannot be scored."""

    equal: bool | None
    reason: str
    timed_out: bool = False


def default_worker_count() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        cores = os.cpu_count() or 1
    return max(1, min(cores, 8))


@dataclass
class _Task:
    worker: WorkerProcess
    index: int
    started: float
    check_at: float
    cpu_at_start: float | None


def _shutdown(idle: queue.SimpleQueue, zygote: Zygote | None, owner_pid: int) -> None:
    if os.getpid() != owner_pid:
        return  # a forked child must never kill its parent's workers
    while True:
        try:
            worker = idle.get_nowait()
        except queue.Empty:
            break
        if worker is not None:
            worker.kill()
    if zygote is not None:
        zygote.close()


class Verifier:
    """Runs `(gold, pred)` comparisons in worker processes with a per-comparison deadline.

    Args:
        workers: worker processes (default: the cores this process may use, at most 8).
        timeout_s: budget per comparison: seconds of the worker's CPU time where the OS reports it (Linux),
            else wall-clock seconds. CPU time keeps a slow-but-honest answer from timing out only because
            the machine is busy; `wall_factor * timeout_s` of wall time is a hard backstop either way.
        wall_factor: the wall-clock backstop as a multiple of `timeout_s`.
        memory_limit_mb: address-space limit of each worker (None = unlimited).
        cache_size: recent verdicts kept (GRPO groups repeat answers); 0 disables the cache.
    """

    def __init__(
        self,
        workers: int | None = None,
        *,
        timeout_s: float = 1.0,
        wall_factor: float = 3.0,
        memory_limit_mb: int | None = 2048,
        cache_size: int = 4096,
    ) -> None:
        if timeout_s <= 0:
            raise RewardError(f"timeout_s must be > 0, got {timeout_s}")
        self.workers = workers or default_worker_count()
        self.timeout_s = timeout_s
        self.wall_factor = max(1.0, wall_factor)
        self.memory_limit_mb = memory_limit_mb
        self.cache_size = cache_size
        self._setup()

    def _setup(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[str, str], Verdict] = OrderedDict()
        self._prestarted = False
        self._idle: queue.SimpleQueue[WorkerProcess | None] = queue.SimpleQueue()
        for _ in range(self.workers):
            self._idle.put(None)  # a slot; the process starts on first use
        self._zygote: Zygote | None = None
        self._zygote_lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _shutdown, self._idle, None, self._pid)

    # Pickling (TRL may pickle reward functions) carries the settings, never processes or pipes.
    def __getstate__(self) -> dict[str, Any]:
        return {
            "workers": self.workers,
            "timeout_s": self.timeout_s,
            "wall_factor": self.wall_factor,
            "memory_limit_mb": self.memory_limit_mb,
            "cache_size": self.cache_size,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._setup()

    def close(self) -> None:
        """Stop the workers now (they are also stopped at garbage collection and exit); reusable after."""
        with self._zygote_lock:
            _shutdown(self._idle, self._zygote, self._pid)
            self._zygote = None
            self._prestarted = False
        for _ in range(self.workers):
            self._idle.put(None)

    def __enter__(self) -> Verifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def check(self, gold: str, pred: str) -> Verdict:
        return self.check_many([(gold, pred)])[0]

    def check_many(self, pairs: Sequence[tuple[str, str]]) -> list[Verdict]:
        """One verdict per pair, in order; at most about `timeout_s` per pair, run in parallel."""
        if os.getpid() != self._pid:  # forked child: the parent's workers and pipes are not ours
            self._setup()
        results: list[Verdict | None] = [None] * len(pairs)
        todo: dict[tuple[str, str], list[int]] = {}
        for index, pair in enumerate(pairs):
            cached = self._cached(pair)
            if cached is not None:
                results[index] = cached
            else:
                todo.setdefault(pair, []).append(index)  # identical pairs are verified once
        if todo:
            unique = list(todo)
            for pair, verdict in zip(unique, self._run(unique), strict=True):
                self._remember(pair, verdict)
                for index in todo[pair]:
                    results[index] = verdict
        return results  # type: ignore[return-value]

    def _cached(self, pair: tuple[str, str]) -> Verdict | None:
        if not self.cache_size:
            return None
        with self._lock:
            verdict = self._cache.get(pair)
            if verdict is not None:
                self._cache.move_to_end(pair)
            return verdict

    def _remember(self, pair: tuple[str, str], verdict: Verdict) -> None:
        if not self.cache_size:
            return
        with self._lock:
            self._cache[pair] = verdict
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)

    def _start(self) -> WorkerProcess:
        with self._zygote_lock:
            if self._zygote is None or not self._zygote.alive():
                self._zygote = Zygote(self.memory_limit_mb * 1024 * 1024 if self.memory_limit_mb else None)
                self._finalizer = weakref.finalize(self, _shutdown, self._idle, self._zygote, self._pid)
            return WorkerProcess(self._zygote)

    def _checkout(self, block: bool) -> WorkerProcess | bool:
        """A ready worker (started if needed), or False when none is idle and block is False."""
        try:
            slot = self._idle.get(block=block)
        except queue.Empty:
            return False
        try:
            worker = slot if slot is not None and slot.alive() else self._start()
            worker.wait_ready()
            return worker
        except BaseException:
            self._idle.put(None)
            raise

    def _remaining(self, task: _Task, now: float) -> float:
        """Budget left for a running task: CPU seconds where measurable, capped by the wall backstop."""
        wall_left = task.started + self.wall_factor * self.timeout_s - now
        if wall_left <= 0:
            return 0.0
        cpu_now = task.worker.cpu_seconds()
        if cpu_now is None or task.cpu_at_start is None:
            return task.started + self.timeout_s - now
        return min(self.timeout_s - (cpu_now - task.cpu_at_start), wall_left)

    def _prestart(self) -> None:
        """Boot every idle slot at once on first use, so no later call waits for a cold interpreter."""
        with self._lock:
            if self._prestarted:
                return
            self._prestarted = True
        slots = []
        while True:
            try:
                slots.append(self._idle.get_nowait())
            except queue.Empty:
                break
        for index, slot in enumerate(slots):
            try:
                self._idle.put(slot if slot is not None else self._start())
            except BaseException:  # every slot taken out goes back, or a later check would wait forever
                for rest in slots[index:]:
                    self._idle.put(rest)
                raise

    def _run(self, pairs: list[tuple[str, str]]) -> list[Verdict]:
        self._prestart()
        results: list[Verdict | None] = [None] * len(pairs)
        pending = deque(range(len(pairs)))
        free: list[WorkerProcess] = [self._checkout(block=True)]  # type: ignore[list-item]
        while len(free) < min(len(pairs), self.workers):
            extra = self._checkout(block=False)
            if extra is False:
                break
            free.append(extra)  # type: ignore[arg-type]
        busy: dict[Any, _Task] = {}
        try:
            while pending or busy:
                if not free and not busy:  # every worker of ours was replaced: wait for a ready one
                    free.append(self._checkout(block=True))  # type: ignore[arg-type]
                while free and pending:
                    worker, index = free.pop(), pending.popleft()
                    gold, pred = pairs[index]
                    worker.send((index, gold, pred))
                    now = time.monotonic()
                    busy[worker.conn] = _Task(worker, index, now, now + self.timeout_s, worker.cpu_seconds())
                next_check = min(task.check_at for task in busy.values())
                for conn in wait(list(busy), timeout=max(0.0, next_check - time.monotonic())):
                    task = busy.pop(conn)
                    try:
                        _, equal, reason = task.worker.conn.recv()  # conn is this connection, typed
                        results[task.index] = Verdict(equal, reason)
                        free.append(task.worker)
                    except (EOFError, OSError):  # the worker died (e.g. killed by the OS for memory)
                        results[task.index] = Verdict(False, "verification worker crashed")
                        task.worker.kill()
                        self._idle.put(self._start())
                now = time.monotonic()
                for conn, task in list(busy.items()):
                    if task.check_at > now:
                        continue
                    remaining = self._remaining(task, now)
                    if remaining > 0:
                        task.check_at = now + max(remaining, 0.02)
                        continue
                    del busy[conn]
                    task.worker.kill()
                    results[task.index] = Verdict(False, f"verification timed out after {self.timeout_s:g} s", True)
                    # The replacement forks from the zygote; the batch goes on with the other workers.
                    self._idle.put(self._start())
        finally:
            for task in busy.values():  # interrupted mid-task: their pipes hold stale replies
                task.worker.kill()
                self._idle.put(None)
            for worker in free:
                self._idle.put(worker)
        return results  # type: ignore[return-value]


_shared_lock = threading.Lock()
_shared: dict[tuple[int | None, float], Verifier] = {}


def shared_verifier(workers: int | None = None, timeout_s: float = 1.0) -> Verifier:
    """One pool per settings per process, created on first use.

    A process pool is a per-process resource (like an executor): every reward with the same settings
    shares it, instead of each reward object starting its own interpreters.
    """
    key = (workers, timeout_s)
    with _shared_lock:
        verifier = _shared.get(key)
        if verifier is None:
            verifier = _shared[key] = Verifier(workers, timeout_s=timeout_s)
        return verifier


__all__ = ["Verdict", "Verifier", "default_worker_count", "shared_verifier"]
