"""The run's vector store (dedup, top-k injection), owned by one worker thread.

Its cold start (chromadb, onnxruntime, the embedding model) runs on that thread while the first rollouts
wait on the network, and every later store call runs there too, so one thread owns chromadb and the
embedder and the event loop never blocks on them.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from experiences.dedup import Folded, enforce_dedup
from experiences.embedders import Embedder, OnnxMiniLMEmbedder
from experiences.model import Library
from experiences.ops import Operation
from experiences.store import ExperienceStore
from tfgrpo.learn.stages.consolidate import NearDuplicate
from tfgrpo.rollout.injection import Injector


class StoreWorker:
    def __init__(self, store_dir: Path) -> None:
        self.store_dir = store_dir
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vector-store")
        self._future: Future[ExperienceStore] | None = None
        self._embedder: Future[Embedder] | None = None

    def start(self) -> None:
        """Begin opening the vector store in the background (a no-op once started)."""
        if self._future is None:
            # chromadb imports httpx; the openai SDK looks httpx up in sys.modules on every reply, and a
            # half-imported module there (from the store thread) breaks it. So it is imported here, whole.
            import httpx  # noqa: F401

            self._future = self._thread.submit(self._open)

    def _open(self) -> ExperienceStore:
        # On the store's own thread, after any bare embedder it loaded first (one thread: in order), so the
        # model is loaded once per run.
        embedder = self._embedder.result() if self._embedder is not None else None
        return ExperienceStore.opened_warm(self.store_dir, **({"embedder": embedder} if embedder else {}))

    async def synced(self, library: Library) -> ExperienceStore:
        """The store, in step with `library` (waits for the background load if still running)."""
        self.start()
        assert self._future is not None
        store = await asyncio.wrap_future(self._future)
        await self.call(store.sync, library)
        return store

    async def embedder(self) -> Embedder:
        """The store's embedder; while the store was never needed (an empty library), a bare one, loaded
        without chromadb, so a run from scratch can compare its first lessons without opening the store."""
        if self._future is not None:
            return (await asyncio.wrap_future(self._future)).embedder
        if self._embedder is None:
            self._embedder = self._thread.submit(_warm_embedder)
        return await asyncio.wrap_future(self._embedder)

    async def fold_duplicates(self, library: Library, operations: list[Operation], threshold: float) -> Folded:
        """`experiences.dedup.enforce_dedup` on this thread; an empty library needs only the embedder."""
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

    def close(self) -> None:
        self._thread.shutdown(wait=True, cancel_futures=True)


def _warm_embedder() -> Embedder:
    embedder = OnnxMiniLMEmbedder()
    embedder.load()
    return embedder
