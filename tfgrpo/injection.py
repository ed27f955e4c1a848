"""Which experiences go into a rollout prompt, and how they are written: one place for learn and eval."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiences import Library, render


@dataclass
class Injector:
    """Renders the library for one query: the whole library (`all`) or the K nearest (`topk:K`)."""

    library: Library
    spec: str = "all"
    store: Any | None = None  # experiences.store.ExperienceStore, only for topk

    @classmethod
    def from_paths(cls, library_path: str | Path, spec: str = "all", *, store_dir: str | Path | None = None) -> Injector:
        return cls.for_library(Library.load(library_path), spec, store_dir=store_dir)

    @classmethod
    def for_library(cls, library: Library, spec: str = "all", *, store_dir: str | Path | None = None) -> Injector:
        k = _topk(spec)
        store = None
        if k is not None:
            from experiences.store import ExperienceStore

            store = ExperienceStore(Path(store_dir) if store_dir else None)
            store.sync(library)
        return cls(library=library, spec=spec, store=store)

    def text_for(self, query: str) -> str:
        if len(self.library) == 0:
            return ""
        k = _topk(self.spec)
        if k is None or len(self.library) <= k:
            return render(self.library)
        ids = [hit.id for hit in self.store.query(query, k=k)]
        chosen = [e for e in self.library if e.id in set(ids)]
        return render(self.library, experiences=chosen)


def _topk(spec: str) -> int | None:
    spec = spec.strip().lower()
    if spec == "all":
        return None
    if spec.startswith("topk:") and spec[5:].isdigit() and int(spec[5:]) > 0:
        return int(spec[5:])
    from tfgrpo.config import ConfigError

    raise ConfigError(f"inject must be 'all' or 'topk:K' with K > 0 (got {spec!r})")
