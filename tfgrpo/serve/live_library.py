"""The library being served, reloaded when its file changes, without dropping a request.

A request takes `LiveLibrary.current` once, at its start, and uses that snapshot to the end; a reload
builds a new snapshot off the event loop and swaps the reference. A file that does not load (half
written, invalid) keeps the old version serving and is counted in `/health`. Both are reported to
`on_reload` / `on_reload_error` (serve logs and counts them).

A snapshot is identified by its content hash, not only by the file's `version`: editing a lesson without
bumping `version` serves different text, so it must be a different version in traces and comparisons.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tfgrpo.experiences import Experience, Injection, Library
from tfgrpo.experiences.errors import ExperienceError
from tfgrpo.experiences.render import render, render_system_text
from tfgrpo.experiences.store import ExperienceStore
from tfgrpo.rollout.injection import Injector

MISSING = (-1, -1)  # the stamp of a file that is not there


@dataclass(frozen=True)
class Snapshot:
    library: Library
    stamp: tuple[int, int]  # (mtime_ns, size) of the file it came from
    whole: str = ""  # the system message with every experience, rendered once per version (`--inject all`)
    #: sha256 of the library as served (`whole`: every experience's id and text as the model reads them)
    content_hash: str = ""

    @classmethod
    def load(cls, path: Path) -> Snapshot:
        stamp = _stamp(path)  # before reading: a write after this is seen as a change next time
        library = Library.load(path)
        whole = render_system_text(render(library), library=library) if len(library) else ""
        return cls(library, stamp, whole, hashlib.sha256(whole.encode("utf-8")).hexdigest())

    @property
    def version(self) -> int:
        return self.library.version


class LiveLibrary:
    def __init__(
        self,
        path: Path,
        *,
        store_dir: Path | None = None,
        on_reload: Callable[[Snapshot], None] | None = None,
        on_reload_error: Callable[[str], None] | None = None,
    ):
        self.path = path
        self.store_dir = store_dir
        self.on_reload = on_reload
        self.on_reload_error = on_reload_error
        self.current = Snapshot.load(path)
        self.reloads = 0
        self.reload_errors: list[str] = []
        self._failed_stamp: tuple[int, int] | None = None
        self._last_error: str | None = None  # a file caught mid-write fails twice the same way: one line
        self._store_lock = threading.Lock()
        self._store: ExperienceStore | None = None  # built at the first topk request (loads an embedding model)

    def system_message(self, snapshot: Snapshot, injection: Injection, query: str) -> tuple[str, list[Experience]]:
        """The system text the library arm gets for `query` ('' when nothing is injected) and the experiences in it."""
        if injection.mode == "all" or (injection.mode == "topk" and len(snapshot.library) <= (injection.k or 0)):
            return snapshot.whole, list(snapshot.library.experiences)
        with self._store_lock:  # one vector store, built once, synced and queried by one request at a time
            injector = Injector(library=snapshot.library, spec=str(injection), store=self._vector_store())
            chosen = injector.select(query)
        if not chosen:
            return "", []
        return render_system_text(injector.text_for(query, chosen), library=snapshot.library), chosen

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

    async def watch(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            await asyncio.to_thread(self.reload_if_changed)

    def _vector_store(self) -> ExperienceStore:
        if self._store is None:
            self._store = ExperienceStore(self.store_dir)
        return self._store

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
