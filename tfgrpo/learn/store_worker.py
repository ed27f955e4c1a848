"""The run's vector store (dedup, top-k injection): a process of its own, driven from one worker thread.

The store's cold start (chromadb, onnxruntime, the embedding model: ~1 s of CPU whose imports hold the GIL)
runs in a child process (`experiences.store_process`), started while the first rollouts wait on the network,
so it takes the other core instead of slowing the reading of the replies; the learn process never imports
chromadb. Every store call is a blocking round trip to that process, made on this worker's one thread, so the
event loop never blocks on it.

The store's process grows by ~0.6-1 MB a step under a learn run's churn (chromadb 1.5; measured with
benchmarks/scale.py: 297 -> 327 MB over 30 steps, 375 MB after 100), so once it has grown by
RECYCLE_GROWTH_MB since its first commit, the worker replaces it after a step's commit: the old process exits,
a new one opens the same store on disk (nothing is embedded again) and is sent the library, in the next
step's network wait. The store is derived from the library, so a replacement that fails costs no lesson:
the next call that needs the store reports it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiences.errors import ExperienceError
from experiences.model import Experience, Library
from experiences.ops import Operation
from tfgrpo.learn.stages.consolidate import NearDuplicate
from tfgrpo.rollout.injection import Injector

if TYPE_CHECKING:  # loaded where used: the store's modules stay off learn's path to its first request
    from experiences.dedup import Folded
    from experiences.store_process import StoreProcess

#: growth of the store's process (RSS, MB) since its first commit past which it is replaced after a step's commit
RECYCLE_GROWTH_MB = 32.0


class StoreWorker:
    def __init__(self, store_dir: Path) -> None:
        self.store_dir = store_dir
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vector-store")
        self._process: StoreProcess | None = None
        self._future: Future[StoreProcess] | None = None
        self._started_mb: float | None = None  # its RSS after its first commit: what its growth is measured from
        self._closing: threading.Thread | None = None
        self.replacements = 0

    def start(self) -> None:
        """Start the store's process (a no-op once started); its cold start runs there, on another core."""
        self._launch(open_store=True)

    def _launch(self, *, open_store: bool) -> None:
        if self._future is None:
            self._future = self._thread.submit(self._open, open_store)

    def _open(self, open_store: bool) -> StoreProcess:
        # On the worker's thread: starting the child and waiting for its cold start block only this thread.
        from experiences.store_process import StoreProcess

        log_path = self.store_dir.parent / "store.log"
        self._process = StoreProcess(self.store_dir, log_path=log_path, open_at_start=open_store)
        self._process.wait_ready()
        self._started_mb = None  # measured once it holds the library (_replace_if_grown)
        return self._process

    def _current(self) -> StoreProcess:
        """On the worker's thread: the store's process as it is now (its start's failure raised here)."""
        assert self._future is not None
        self._future.result()
        if self._process is None:  # a replacement failed to start: say so at the call that needs the store
            raise ExperienceError(
                f"the vector store's process could not be restarted; its log: {self.store_dir.parent / 'store.log'}"
            )
        return self._process

    async def synced(self, library: Library) -> StoreProcess:
        """The store, in step with `library` (waits for the background load if still running)."""
        self.start()
        return await self.call(self._synced_now, library)

    def _synced_now(self, library: Library) -> StoreProcess:
        store = self._current()
        store.sync(library)
        return store

    def sync_ahead(self, library: Library) -> None:
        """Send `library` to a started store now, without waiting for it: the store's process embeds the
        changed lessons on its own core while the next step's requests are out, so that step's dedup finds
        them done (step 2's near-duplicate hints waited 60-120 ms for it on the steps workload). A no-op before
        the store is started; a failure here is left for the next call that needs the store to report."""
        if self._future is None:
            return
        # A snapshot of what the store holds (ids and texts): the run goes on changing `library`'s counters.
        lessons = Library(experiences=[Experience(id=e.id, text=e.text) for e in library.experiences])
        self._thread.submit(self._sync_quietly, lessons)

    def _sync_quietly(self, lessons: Library) -> None:
        with contextlib.suppress(Exception):
            store = self._current()
            store.sync(lessons)
            self._replace_if_grown(store, lessons)

    def _replace_if_grown(self, store: StoreProcess, lessons: Library) -> None:
        """A new process for the store once `store` has grown by RECYCLE_GROWTH_MB (see the module's doc)."""
        now = store.rss_mb()
        if now is None:
            return
        if self._started_mb is None:  # the first commit it holds: loaded, embedded, its buffers sized
            self._started_mb = now
        if now - self._started_mb <= RECYCLE_GROWTH_MB:
            return
        store.close()  # first: two processes must not hold the same store on disk
        self._process = None
        self._open(open_store=True).sync(lessons)
        self.replacements += 1

    async def embedder(self) -> Any:
        """The store process's embedder (`embed`): a run from scratch compares its first lessons with it
        without opening the collection (the process opens chromadb on the first call that needs it)."""
        self._launch(open_store=False)  # only the embedder, unless the store was started already
        return (await self.call(self._current)).embedder

    async def fold_duplicates(self, library: Library, operations: list[Operation], threshold: float) -> Folded:
        """`experiences.dedup.enforce_dedup` on this thread; an empty library needs only the embedder."""
        from experiences.dedup import enforce_dedup

        if not len(library):  # only the step's own adds to compare: the embedder, not the store
            return await self.call(enforce_dedup, library, operations, await self.embedder(), threshold=threshold)
        store = await self.synced(library)
        return await self.call(enforce_dedup, library, operations, store, threshold=threshold)

    async def near_duplicates(self, library: Library, texts: list[str], threshold: float) -> list[NearDuplicate]:
        """Texts at or above `threshold` cosine of an experience: hints for consolidation."""
        store = await self.synced(library)
        matches = await self.call(store.query_many, texts, k=1)
        return [
            NearDuplicate(text=text, id=found[0].id, similarity=round(found[0].similarity, 2))
            for text, found in zip(texts, matches, strict=False)
            if found and found[0].similarity >= threshold
        ]

    async def call(self, function: Any, *args: Any, **kwargs: Any) -> Any:
        """Run `function` on the store's thread."""
        return await asyncio.get_running_loop().run_in_executor(self._thread, lambda: function(*args, **kwargs))

    async def injector(self, library: Library, spec: str) -> Injector:
        """What goes into a prompt from `library`; only top-k injection needs (and waits for) the store."""
        return Injector(library=library, spec=spec, store=await self.synced(library) if spec != "all" else None)

    def release(self) -> None:
        """Stop the store without waiting: calls not yet started are dropped, and the process's exit (the kernel
        frees its ~300 MB in 20-30 ms) is waited for on a thread of its own while the run writes its last files;
        `close` joins it."""
        if self._closing is None:
            self._thread.shutdown(wait=False, cancel_futures=True)
            self._closing = threading.Thread(target=self._close_now, name="vector-store-close")
            self._closing.start()

    def close(self) -> None:
        """Stop the store and wait until its process has exited."""
        self.release()
        assert self._closing is not None
        self._closing.join()

    def _close_now(self) -> None:
        self._thread.shutdown(wait=True)  # the call running now, if any, ends first
        if self._process is not None:
            self._process.close()
