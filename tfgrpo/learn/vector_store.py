"""The run's vector store (dedup, top-k injection): chromadb in a process of its own, called from one thread.

Why a process: chromadb grows under a learn run's churn (its process by about 1 MB a step), and memory it
takes is not given back while it lives. In the learn process that made peak RSS grow with the steps
(`benchmarks/scale.py`: 416 -> 516 MB from 10 to 100 steps, 1.24x); in a child process
(`tfgrpo.experiences.store_process`) that is replaced once it has grown by RECYCLE_GROWTH_MB, the rows stay flat.
The store is derived from the library, so a replacement opens the same store on disk and embeds nothing
again, and one that fails costs no lesson: the next call that needs the store reports it.

Every call is a blocking round trip to that process, made on this object's one thread, in order, so the
event loop keeps reading replies meanwhile. The process starts on the first call; while the library is
empty it only embeds (dedup of a step's own adds), and opens chromadb when a call needs the collection.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfgrpo.experiences.errors import ExperienceError
from tfgrpo.experiences.model import Experience, Library
from tfgrpo.experiences.ops import Operation
from tfgrpo.learn.stages.consolidate import NearDuplicate
from tfgrpo.rollout.injection import Injector

if TYPE_CHECKING:  # chromadb's side loads in the store's process, with the first step that needs it
    from tfgrpo.experiences.dedup import Folded
    from tfgrpo.experiences.store_process import StoreProcess

#: growth of the store's process (RSS, MB) since it first held a library past which it is replaced
RECYCLE_GROWTH_MB = 32.0


class VectorStore:
    """The store of one run directory, in a child process started on first use, called from one thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.log_path = path.parent / "store.log"
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vector-store")
        self._process: StoreProcess | None = None
        self._started_mb: float | None = None  # its RSS when it first held a library: what growth is measured from
        self.replacements = 0

    async def call(self, function: Any, *args: Any, **kwargs: Any) -> Any:
        """Run `function` on the store's thread."""
        return await asyncio.get_running_loop().run_in_executor(self._thread, lambda: function(*args, **kwargs))

    def _current(self) -> StoreProcess:
        """On the store's thread: the store's process, started now if it is not running."""
        if self._process is None:
            from tfgrpo.experiences.store_process import StoreProcess

            self._process = StoreProcess(self.path, log_path=self.log_path, open_at_start=False)
            self._process.wait_ready()
            self._started_mb = None
        return self._process

    def _synced_now(self, library: Library) -> StoreProcess:
        store = self._current()
        store.sync(library)
        return store

    async def synced(self, library: Library) -> StoreProcess:
        """The store, holding exactly `library`'s experiences."""
        store: StoreProcess = await self.call(self._synced_now, library)
        return store

    async def injector(self, library: Library, spec: str) -> Injector:
        """What goes into a prompt from `library`; only top-k injection needs the store."""
        return Injector(library=library, spec=spec, store=await self.synced(library) if spec != "all" else None)

    async def fold_duplicates(self, library: Library, operations: list[Operation], threshold: float) -> Folded:
        """`tfgrpo.experiences.dedup.enforce_dedup` of `operations` against `library`, on the store's thread."""
        from tfgrpo.experiences.dedup import enforce_dedup

        # an empty library: only the step's own adds to compare, which needs the embedder, not the collection
        store = await self.synced(library) if len(library) else (await self.call(self._current)).embedder
        folded: Folded = await self.call(enforce_dedup, library, operations, store, threshold=threshold)
        return folded

    async def near_duplicates(self, library: Library, texts: list[str], threshold: float) -> list[NearDuplicate]:
        """Texts at or above `threshold` cosine of an experience: hints for consolidation."""
        store = await self.synced(library)
        matches = await self.call(store.query_many, texts, k=1)
        return [
            NearDuplicate(text=text, id=found[0].id, similarity=round(found[0].similarity, 2))
            for text, found in zip(texts, matches, strict=False)
            if found and found[0].similarity >= threshold
        ]

    def replace_if_grown(self, library: Library) -> None:
        """After a step is written: queue, on the store's thread, a replacement of a process that has grown by
        RECYCLE_GROWTH_MB; the next call waits for it. A no-op before the process has started."""
        if self._process is not None:
            # a snapshot of what the store holds: the run goes on changing the library's counters
            lessons = Library(experiences=[Experience(id=e.id, text=e.text) for e in library.experiences])
            self._thread.submit(self._replace_now, lessons)

    def _replace_now(self, lessons: Library) -> None:
        store = self._process
        now = store.rss_mb() if store is not None and store.holds_library else None
        if store is None or now is None:
            return
        if self._started_mb is None:  # the first library it holds: loaded, embedded, its buffers sized
            self._started_mb = now
        if now - self._started_mb <= RECYCLE_GROWTH_MB:
            return
        store.close()  # first: two processes must not hold the same store on disk
        self._process = None
        self.replacements += 1
        try:
            self._synced_now(lessons)
        except ExperienceError:
            self._process = None  # started again by the next call, which then reports what fails

    def close(self) -> None:
        """Wait for the call under way, stop the thread and the store's process."""
        self._thread.shutdown(wait=True)
        if self._process is not None:
            self._process.close()


__all__ = ["RECYCLE_GROWTH_MB", "VectorStore"]
