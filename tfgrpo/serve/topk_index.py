"""The top-k index of the served library: its vector store, brought in step at load and at every reload.

A `topk:K` request costs one query embedding and one nearest-neighbour search (chromadb's HNSW index),
whatever the library's size: the library's own lessons are embedded when it is loaded (all of them at
start, only the changed ones at a reload, before the new version is served), never by a request. The
chosen lessons are put back in library order through the snapshot's id positions, not by a scan.
"""

from __future__ import annotations

import threading
from pathlib import Path

from tfgrpo.experiences import Experience, Library
from tfgrpo.experiences.store import ExperienceStore


class TopkIndex:
    def __init__(self, store_dir: Path | None):
        # one store, synced and queried by one thread at a time (chromadb's collection is not ours to share)
        self._lock = threading.Lock()
        self._store = ExperienceStore.opened_warm(store_dir)

    def update(self, library: Library) -> None:
        """Embed what changed since the last update (everything, the first time): at load and reload only."""
        with self._lock:
            self._store.sync(library)

    def nearest(self, library: Library, positions: dict[str, int], query: str, k: int) -> list[Experience]:
        """The `k` lessons of `library` nearest to `query`, in library order (`positions`: id -> index)."""
        with self._lock:
            matches = self._store.query(query, k=k)
        found = sorted(positions[match.id] for match in matches if match.id in positions)
        return [library.experiences[position] for position in found]
