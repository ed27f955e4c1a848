"""A pool of killable worker processes that run math-verify under a hard deadline.

Why processes: sympy can run for minutes (or forever) on a hostile answer such as `9^{9^{9^{9^9}}}`, and
math-verify's own timeout (`signal.alarm`) only works in the main thread, so it cannot protect a reward
called from a thread or an asyncio loop. Here each comparison runs in a worker; when its deadline passes
the worker is killed (SIGKILL works whatever sympy is doing) and a replacement starts in the background
(a fresh interpreter, ~0.4 s, never on the caller's clock). A batch is spread over all workers, so the
pool also uses every core.

Thread-safe: each call checks workers out of a shared queue, so concurrent callers never share a pipe.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Sequence
from multiprocessing.connection import Connection, wait
from typing import Any, NamedTuple

from rewards.errors import RewardError

_WORKER_MODULE = "rewards._verify_worker"
READY = "ready"  # the worker's first message, once sympy is imported
_STARTUP_TIMEOUT_S = 120.0  # a cold worker imports sympy; generous, and counted apart from task deadlines


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


class _Worker:
    """One `python -m rewards._verify_worker` process and its two pipes; starting it does not wait."""

    def __init__(self, memory_limit_bytes: int | None) -> None:
        to_child_r, to_child_w = os.pipe()
        to_parent_r, to_parent_w = os.pipe()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", _WORKER_MODULE, str(to_child_r), str(to_parent_w), str(memory_limit_bytes or 0)],
                pass_fds=(to_child_r, to_parent_w),
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONPATH": _python_path()},
            )
        except OSError as exc:
            for fd in (to_child_r, to_child_w, to_parent_r, to_parent_w):
                os.close(fd)
            raise RewardError(f"could not start a math-verify worker: {exc}") from exc
        os.close(to_child_r)
        os.close(to_parent_w)
        self.requests = Connection(to_child_w, readable=False)
        self.conn = Connection(to_parent_r, writable=False)
        self.ready = False

    def wait_ready(self) -> None:
        """Block until the worker has imported sympy (startup is never charged to a task's deadline)."""
        if self.ready:
            return
        try:
            if self.conn.poll(_STARTUP_TIMEOUT_S) and self.conn.recv() == READY:
                self.ready = True
                return
        except (EOFError, OSError):
            pass
        self.kill()
        raise RewardError(f"a math-verify worker did not start (exit code {self.process.poll()})")

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.requests.close()
        self.conn.close()


def _python_path() -> str:
    # The worker must import this very `rewards` package, even when it is not installed (a source checkout).
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    existing = os.environ.get("PYTHONPATH")
    return package_root + (os.pathsep + existing if existing else "")


def _shutdown(idle: queue.SimpleQueue) -> None:
    while True:
        try:
            worker = idle.get_nowait()
        except queue.Empty:
            return
        if worker is not None:
            worker.kill()


class Verifier:
    """Runs `(gold, pred)` comparisons in worker processes with a per-comparison deadline.

    Args:
        workers: worker processes (default: the cores this process may use, at most 8).
        timeout_s: wall-clock deadline per comparison, counted from when a worker receives it.
        memory_limit_mb: address-space limit of each worker (None = unlimited).
        cache_size: recent verdicts kept (GRPO groups repeat answers); 0 disables the cache.
    """

    def __init__(self, workers: int | None = None, *, timeout_s: float = 1.0, memory_limit_mb: int | None = 2048,
                 cache_size: int = 4096) -> None:
        if timeout_s <= 0:
            raise RewardError(f"timeout_s must be > 0, got {timeout_s}")
        self.workers = workers or default_worker_count()
        self.timeout_s = timeout_s
        self.memory_limit_mb = memory_limit_mb
        self.cache_size = cache_size
        self._setup()

    def _setup(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[str, str], Verdict] = OrderedDict()
        self._idle: queue.SimpleQueue[_Worker | None] = queue.SimpleQueue()
        for _ in range(self.workers):
            self._idle.put(None)  # a slot; the process starts on first use
        self._finalizer = weakref.finalize(self, _shutdown, self._idle)

    # Pickling (TRL may pickle reward functions) carries the settings, never processes or pipes.
    def __getstate__(self) -> dict[str, Any]:
        return {"workers": self.workers, "timeout_s": self.timeout_s, "memory_limit_mb": self.memory_limit_mb,
                "cache_size": self.cache_size}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._setup()

    def close(self) -> None:
        """Stop the idle workers now (they are also stopped at garbage collection and exit)."""
        _shutdown(self._idle)
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

    def _start(self) -> _Worker:
        return _Worker(self.memory_limit_mb * 1024 * 1024 if self.memory_limit_mb else None)

    def _checkout(self, block: bool) -> _Worker | bool:
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

    def _run(self, pairs: list[tuple[str, str]]) -> list[Verdict]:
        results: list[Verdict | None] = [None] * len(pairs)
        pending = deque(range(len(pairs)))
        free: list[_Worker] = [self._checkout(block=True)]  # type: ignore[list-item]
        while len(free) < min(len(pairs), self.workers):
            extra = self._checkout(block=False)
            if extra is False:
                break
            free.append(extra)  # type: ignore[arg-type]
        busy: dict[Any, tuple[_Worker, int, float]] = {}
        try:
            while pending or busy:
                if not free and not busy:  # every worker of ours was replaced: wait for a ready one
                    free.append(self._checkout(block=True))  # type: ignore[arg-type]
                while free and pending:
                    worker, index = free.pop(), pending.popleft()
                    gold, pred = pairs[index]
                    worker.requests.send((index, gold, pred))
                    busy[worker.conn] = (worker, index, time.monotonic() + self.timeout_s)
                next_deadline = min(deadline for _, _, deadline in busy.values())
                for conn in wait(list(busy), timeout=max(0.0, next_deadline - time.monotonic())):
                    worker, index, _ = busy.pop(conn)
                    try:
                        _, equal, reason = conn.recv()
                        results[index] = Verdict(equal, reason)
                        free.append(worker)
                    except (EOFError, OSError):  # the worker died (e.g. killed by the OS for memory)
                        results[index] = Verdict(False, "verification worker crashed")
                        worker.kill()
                        self._idle.put(self._start())
                now = time.monotonic()
                for conn, (worker, index, deadline) in list(busy.items()):
                    if deadline <= now:
                        del busy[conn]
                        worker.kill()
                        results[index] = Verdict(False, f"verification timed out after {self.timeout_s:g} s", True)
                        # The replacement boots in the background; the batch goes on with the other workers.
                        self._idle.put(self._start())

        finally:
            for worker, _, _ in busy.values():  # interrupted mid-task: their pipes hold stale replies
                worker.kill()
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

