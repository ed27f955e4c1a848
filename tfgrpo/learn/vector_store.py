"""The run's vector store (dedup, top-k injection): chromadb in this process, opened when a step first needs it.

Its calls embed and search, which block on CPU, so they run on one worker thread of their own, one at a
time and in order (chromadb's client is not shared between threads here); the event loop keeps reading
replies meanwhile. The store is derived from the library, so it is brought in step with it before each use;
while the library is empty, dedup compares a step's adds with the embedder alone and chromadb stays closed.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiences.model import Library
from experiences.ops import Operation
from tfgrpo.learn.stages.consolidate import NearDuplicate
from tfgrpo.rollout.injection import Injector

if TYPE_CHECKING:  # chromadb and onnxruntime load with the first step that needs the store
    from experiences.dedup import Folded
    from experiences.store import ExperienceStore


class VectorStore:
    """The store of one run directory, opened on first use, called from one thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vector-store")
        self._store: ExperienceStore | None = None
        self._embedder: Any = None

    async def call(self, function: Any, *args: Any, **kwargs: Any) -> Any:
        """Run `function` on the store's thread."""
        return await asyncio.get_running_loop().run_in_executor(self._thread, lambda: function(*args, **kwargs))

    def _embedder_now(self) -> Any:
        if self._embedder is None:
            from experiences.embedders import OnnxMiniLMEmbedder

            self._embedder = OnnxMiniLMEmbedder()
        return self._embedder

    def _synced_now(self, library: Library) -> ExperienceStore:
        if self._store is None:
            from experiences.store import ExperienceStore

            self._store = ExperienceStore(self.path, embedder=self._embedder_now())
        self._store.sync(library)
        return self._store

    async def synced(self, library: Library) -> ExperienceStore:
        """The store, holding exactly `library`'s experiences."""
        store: ExperienceStore = await self.call(self._synced_now, library)
        return store

    async def injector(self, library: Library, spec: str) -> Injector:
        """What goes into a prompt from `library`; only top-k injection needs the store."""
        return Injector(library=library, spec=spec, store=await self.synced(library) if spec != "all" else None)

    async def fold_duplicates(self, library: Library, operations: list[Operation], threshold: float) -> Folded:
        """`experiences.dedup.enforce_dedup` of `operations` against `library`, on the store's thread."""
        from experiences.dedup import enforce_dedup

        # an empty library: only the step's own adds to compare, which needs the embedder, not the store
        store = await self.synced(library) if len(library) else await self.call(self._embedder_now)
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

    def close(self) -> None:
        """Wait for the call under way, if any, and stop the thread."""
        self._thread.shutdown(wait=True)


__all__ = ["VectorStore"]
