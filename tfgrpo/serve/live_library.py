"""The library being served, reloaded when its file changes, without dropping a request.

A request takes `LiveLibrary.current` once, at its start, and uses that snapshot to the end; a reload
builds a new snapshot off the event loop and swaps the reference. A file that does not load (half
written, invalid) keeps the old version serving and is counted in `/health`. Both are reported to
`on_reload` / `on_reload_error` (serve logs and counts them).

With a top-k index (`topk_index.py`), a new version's lessons are embedded before it is served; a
`topk:K` request never embeds the library. Without one, a `topk:K` request is refused (400
`topk_unavailable`) rather than made to build it.

A snapshot is identified by its content hash, not only by the file's `version`: editing a lesson without
bumping `version` serves different text, so it must be a different version in traces and comparisons.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tfgrpo.experiences import Experience, Injection, Library
from tfgrpo.experiences.errors import ExperienceError
from tfgrpo.experiences.render import render, render_system_text
from tfgrpo.serve.errors import RequestRejected
from tfgrpo.serve.topk_index import TopkIndex

MISSING = (-1, -1)  # the stamp of a file that is not there


@dataclass(frozen=True)
class Snapshot:
    library: Library
    stamp: tuple[int, int]  # (mtime_ns, size) of the file it came from
    whole: str = ""  # the system message with every experience, rendered once per version (`--inject all`)
    #: sha256 of the library as served (`whole`: every experience's id and text as the model reads them)
    content_hash: str = ""
    #: each experience's index in the library, by id: top-k results are put in library order without a scan
    positions: dict[str, int] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> Snapshot:
        stamp = _stamp(path)  # before reading: a write after this is seen as a change next time
        return cls.of(Library.load(path), stamp)

    @classmethod
    def of(cls, library: Library, stamp: tuple[int, int] = MISSING) -> Snapshot:
        """The snapshot of a library held in memory (a deployed version: no file, no stamp)."""
        whole = render_system_text(render(library), library=library) if len(library) else ""
        positions = {experience.id: index for index, experience in enumerate(library.experiences)}
        return cls(library, stamp, whole, hashlib.sha256(whole.encode("utf-8")).hexdigest(), positions)

    @property
    def version(self) -> int:
        return self.library.version


class LiveLibrary:
    def __init__(
        self,
        path: Path,
        *,
        store_dir: Path | None = None,
        topk_index: bool = False,
        on_reload: Callable[[Snapshot], None] | None = None,
        on_reload_error: Callable[[str], None] | None = None,
    ):
        self.path = path
        self.store_dir = store_dir
        self.on_reload = on_reload
        self.on_reload_error = on_reload_error
        self.current = Snapshot.load(path)
        self.index: TopkIndex | None = None
        if topk_index:  # the embedding model loaded and every lesson embedded now, before serving
            self.index = TopkIndex(store_dir, self.current.library)
        self.reloads = 0
        self.reload_errors: list[str] = []
        self._failed_stamp: tuple[int, int] | None = None
        self._last_error: str | None = None  # a file caught mid-write fails twice the same way: one line

    def system_message(self, snapshot: Snapshot, injection: Injection, query: str) -> tuple[str, list[Experience]]:
        """The system text the library arm gets for `query` ('' when nothing is injected) and the experiences in it."""
        if injection.mode == "all" or (injection.mode == "topk" and len(snapshot.library) <= (injection.k or 0)):
            return snapshot.whole, list(snapshot.library.experiences)
        if self.index is None:
            raise RequestRejected(
                400,
                f"{injection}: this server keeps no top-k index (start it with --inject topk:K or --topk-index)",
                "topk_unavailable",
            )
        chosen = self.index.nearest(snapshot.library, snapshot.positions, query, injection.k or 0)
        if not chosen:
            return "", []
        return render_system_text(render(snapshot.library, experiences=chosen), library=snapshot.library), chosen

    def reload_if_changed(self) -> bool:
        """Load the file again when its (mtime, size) changed; True when a new snapshot is in use."""
        try:
            stamp = _stamp(self.path)
        except OSError as exc:
            if self._failed_stamp != MISSING:  # noted once, until the file is back
                self._failed_stamp = MISSING
                self._note_error(f"{self.path}: {exc.strerror or exc}")
            return False
        if self._failed_stamp == MISSING:
            self._failed_stamp = None
        if stamp in (self.current.stamp, self._failed_stamp):  # a file that failed is tried again once changed
            return False
        try:
            snapshot = Snapshot.load(self.path)
            if self.index is not None:  # its new lessons embedded before it is served
                self.index.update(snapshot.library)
        except (ExperienceError, OSError, ValueError) as exc:
            self._failed_stamp = stamp
            self._note_error(str(exc).splitlines()[0])
            return False
        self.current = snapshot
        self._last_error = None
        self.reloads += 1
        if self.on_reload is not None:
            self.on_reload(snapshot)
        return True

    def serve(self, snapshot: Snapshot) -> None:
        """Serve `snapshot` from now on (a deployment's champion: the file no longer decides)."""
        self.current = snapshot
        if self.on_reload is not None:
            self.on_reload(snapshot)

    async def watch(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            await asyncio.to_thread(self.reload_if_changed)

    def _note_error(self, message: str) -> None:
        if message == self._last_error:
            return
        self._last_error = message
        self.reload_errors = (self.reload_errors + [message])[-10:]
        if self.on_reload_error is not None:
            self.on_reload_error(message)


def _stamp(path: Path) -> tuple[int, int]:
    info = os.stat(path)
    return info.st_mtime_ns, info.st_size
