"""Micro-batching of concurrent requests for in-process backends (transformers, vllm).

Rollouts send many `forward()` calls at once. Running each on its own would leave a local model doing
one prompt per forward pass; instead every call is queued, and a dispatcher task collects what has
arrived into micro-batches (grouped by a key, e.g. identical sampling parameters, and capped in size)
that run one after another in a single worker thread, so the event loop stays free while the model
works. Calls that arrive while a batch runs form the next batch.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

ItemT = TypeVar("ItemT")
ResultT = TypeVar("ResultT")

# How long the dispatcher waits after the first queued call for others to join the batch.
DEFAULT_COLLECT_S = 0.005


@dataclass
class _LoopState(Generic[ItemT, ResultT]):
    """Queue and dispatcher bound to one event loop (chat_sync may run each call in a new loop)."""

    loop: asyncio.AbstractEventLoop
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    pending: list[tuple[ItemT, asyncio.Future[ResultT]]] = field(default_factory=list)
    task: asyncio.Task[None] | None = None


class MicroBatcher(Generic[ItemT, ResultT]):
    """Collects concurrent `submit()` calls into batches for `run_batch`, run in one worker thread.

    `run_batch(items)` returns one entry per item: a result, or an exception raised to that caller only.
    If `run_batch` itself raises, every caller of that batch gets the exception.
    """

    def __init__(
        self,
        run_batch: Callable[[list[ItemT]], Sequence[ResultT | BaseException]],
        *,
        max_batch: int,
        group_key: Callable[[ItemT], Hashable] = lambda item: None,
        size_of: Callable[[ItemT], int] = lambda item: 1,
        collect_s: float = DEFAULT_COLLECT_S,
        thread_name: str = "tfgrpo-batch",
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {max_batch}")
        self._run_batch = run_batch
        self._max_batch = max_batch
        self._group_key = group_key
        self._size_of = size_of
        self._collect_s = collect_s
        self._thread_name = thread_name
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._state: _LoopState[ItemT, ResultT] | None = None

    async def submit(self, item: ItemT) -> ResultT:
        state = self._state_for_running_loop()
        future: asyncio.Future[ResultT] = state.loop.create_future()
        state.pending.append((item, future))
        state.wakeup.set()
        return await future

    async def run_in_worker(self, function: Callable[[], ResultT]) -> ResultT:
        """Run `function` in the worker thread (e.g. loading the model), serialised with the batches."""
        return await asyncio.get_running_loop().run_in_executor(self._worker(), function)

    async def aclose(self) -> None:
        state, self._state = self._state, None
        if state is not None and state.task is not None and not state.task.done():
            state.task.cancel()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    # -- internals ---------------------------------------------------------------------------------

    def _worker(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._executor is None:
            # One thread: batches run one at a time; the model is never entered concurrently.
            self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=self._thread_name)
        return self._executor

    def _state_for_running_loop(self) -> _LoopState[ItemT, ResultT]:
        loop = asyncio.get_running_loop()
        state = self._state
        if state is None or state.loop is not loop or state.task is None or state.task.done():
            state = _LoopState(loop=loop)
            state.task = loop.create_task(self._dispatch(state), name=f"{self._thread_name}-dispatcher")
            self._state = state
        return state

    async def _dispatch(self, state: _LoopState[ItemT, ResultT]) -> None:
        while True:
            await state.wakeup.wait()
            await asyncio.sleep(self._collect_s)  # let callers scheduled in the same tick join
            state.wakeup.clear()
            pending, state.pending = state.pending, []
            for batch in self._plan(pending):
                await self._run(batch)

    def _plan(
        self, pending: list[tuple[ItemT, asyncio.Future[ResultT]]]
    ) -> list[list[tuple[ItemT, asyncio.Future[ResultT]]]]:
        """Group by key (first-come order kept), then cut each group into batches of <= max_batch size."""
        groups: dict[Hashable, list[tuple[ItemT, asyncio.Future[ResultT]]]] = {}
        for entry in pending:
            if not entry[1].cancelled():
                groups.setdefault(self._group_key(entry[0]), []).append(entry)
        batches = []
        for group in groups.values():
            current: list[tuple[ItemT, asyncio.Future[ResultT]]] = []
            size = 0
            for entry in group:
                item_size = max(1, self._size_of(entry[0]))
                if current and size + item_size > self._max_batch:
                    batches.append(current)
                    current, size = [], 0
                current.append(entry)
                size += item_size
            if current:
                batches.append(current)
        return batches

    async def _run(self, batch: list[tuple[ItemT, asyncio.Future[ResultT]]]) -> None:
        items = [item for item, _ in batch]
        loop = asyncio.get_running_loop()
        try:
            results = await loop.run_in_executor(self._worker(), self._run_batch, items)
        except asyncio.CancelledError:
            for _, future in batch:
                future.cancel()
            raise
        except BaseException as exc:  # noqa: BLE001 - forwarded to every caller of this batch, not hidden
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        if len(results) != len(batch):
            error = RuntimeError(f"run_batch returned {len(results)} results for {len(batch)} items")
            results = [error] * len(batch)
        for (_, future), result in zip(batch, results, strict=True):
            if future.done():
                continue
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)


__all__ = ["DEFAULT_COLLECT_S", "MicroBatcher"]
