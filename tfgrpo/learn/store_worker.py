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

from experiences.embedders import Embedder, OnnxMiniLMEmbedder
from experiences.model import Library
from experiences.store import ExperienceStore
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

            self._future = self._thread.submit(ExperienceStore.opened_warm, self.store_dir)

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
