"""The top-k index of the served library: its vector store, brought in step at load and at every reload.

A `topk:K` request costs one query embedding and one nearest-neighbour search (chromadb's HNSW index),
whatever the library's size: the library's own lessons are embedded when it is loaded (at start, all
those the store does not hold yet; at a reload, only the changed ones, before the new version is
served), never by a request. A reload embeds outside the store's lock, so requests keep being answered
from the version still served while a large new version is embedded. The chosen lessons are put back in
library order through the snapshot's id positions, not by a scan of the library.
"""

from __future__ import annotations

import threading
from pathlib import Path

from tfgrpo.experiences import Experience, Library
from tfgrpo.experiences.store import ExperienceStore


class TopkIndex:
    def __init__(self, store_dir: Path | None, library: Library):
        # one store, changed and queried by one thread at a time
        self._lock = threading.Lock()
        self._store = ExperienceStore.opened_warm(store_dir)
        self._store.sync(library)  # a store folder kept from an earlier run: only what changed is embedded
        self._texts = {experience.id: experience.text for experience in library.experiences}

    def update(self, library: Library) -> None:
        """Bring the store in step with `library` (a reload), embedding only new and changed lessons."""
        wanted = {experience.id: experience.text for experience in library.experiences}
        changed = {id_: text for id_, text in wanted.items() if self._texts.get(id_) != text}
        vectors = self._store.embedder.embed(list(changed.values())) if changed else []
        with self._lock:
            # replaced ids are deleted first, so the store counts them towards its index compaction
            self._store.delete([id_ for id_ in self._texts if id_ not in wanted or id_ in changed])
            if changed:
                self._store.upsert(changed, vectors=vectors)
        self._texts = wanted

    def nearest(self, library: Library, positions: dict[str, int], query: str, k: int) -> list[Experience]:
        """The `k` lessons of `library` nearest to `query`, in library order (`positions`: id -> index)."""
        with self._lock:
            matches = self._store.query(query, k=k)
        found = sorted(positions[match.id] for match in matches if match.id in positions)
        return [library.experiences[position] for position in found]
