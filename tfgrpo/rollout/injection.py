"""Which experiences go into a rollout prompt: one place for learn and eval, over `tfgrpo.experiences.Injection`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfgrpo.experiences import Experience, Injection, Library, render
from tfgrpo.experiences.store import ExperienceStore

#: A library whose whole rendering is longer than this (about 16k tokens) fills much of a context window in
#: every prompt. Said once, loudly, with the way out; not refused, since a long-context model may want it.
LARGE_INJECTION_CHARS = 64_000


def injection_warning(library: Library, spec: str, source: str) -> str | None:
    """The warning for a library sent whole (`inject: all`) that is longer than LARGE_INJECTION_CHARS, else None."""
    if Injection.parse(spec).mode != "all":
        return None
    chars = len(render(library))
    if chars <= LARGE_INJECTION_CHARS:
        return None
    return (
        f"library {source}: {len(library)} experiences render to {chars:,} characters (about {chars // 4:,} "
        f"tokens), sent in every prompt (more than {LARGE_INJECTION_CHARS:,}); pass --inject topk:K to send "
        "the K nearest instead"
    )


@dataclass
class Injector:
    """Renders the library for one query: all of it, none, or the K nearest (`topk:K`, needs `store`)."""

    library: Library
    spec: str = "all"
    store: Any | None = None  # experiences.store.ExperienceStore, only for topk

    @classmethod
    def from_paths(
        cls, library_path: str | Path, spec: str = "all", *, store_dir: str | Path | None = None
    ) -> Injector:
        library = Library.load(library_path)
        store = None
        if Injection.parse(spec).mode == "topk":
            store = ExperienceStore(Path(store_dir) if store_dir else None)
        return cls(library=library, spec=spec, store=store)

    def select(self, query: str) -> list[Experience]:
        return Injection.parse(self.spec).select(self.library, query=query, store=self.store)

    def text_for(self, query: str, chosen: list[Experience] | None = None) -> str:
        """The rendered experiences for `query` (`chosen`: a `select` already made for it)."""
        return render(self.library, experiences=self.select(query) if chosen is None else chosen)
