"""Read-modify-write of a library file and its history, safe against concurrent writers and kills.

A change is committed in this order, under the library's lock (`atomic.locked`):

1. baseline snapshot of the version being changed (first edit of a hand-written file);
2. snapshot of the new version (atomic write);
3. its records appended to the op log (one write);
4. the library file replaced (atomic write).

The history is the source of truth. A kill after step 2 or 3 leaves a history one version ahead of
the library file; the next `open_library` (under the lock) rolls the file forward to that snapshot
(and logs a `recovered` record), cuts a torn last line off the op log and deletes temp files a killed
writer left. A kill before step 2 changes nothing visible. So every later apply works, and no version
number ever names two different libraries.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

from tfgrpo.core.atomic import LOCK_TIMEOUT_S, crash_point, locked, remove_stale_temps
from tfgrpo.experiences.apply import ApplyResult
from tfgrpo.experiences.history import History
from tfgrpo.experiences.model import Library

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def open_library(
    library_path: str | Path, history: History, *, timeout_s: float = LOCK_TIMEOUT_S
) -> Iterator[Library]:
    """Lock `library_path`, repair what a killed writer left, and yield the current library.

    Commit changes with `commit_library` inside the `with` block; the lock is released after it."""
    library_path = Path(library_path)
    if not library_path.is_file():  # refused before the lock: no `.lock` file (or folder) beside a missing path
        Library.load(library_path)
    with locked(library_path, timeout_s=timeout_s):
        recover(library_path, history)
        yield Library.load(library_path)


def commit_library(
    library_path: str | Path,
    history: History,
    before: Library,
    result: ApplyResult,
    *,
    step: int | None = None,
    extra: dict | None = None,
) -> None:
    """Steps 1-4 above (call under `open_library`)."""
    history.ensure_baseline(before)
    crash_point()
    history.commit_result(result, step=step, extra=extra)
    crash_point()
    result.library.save(library_path)
    crash_point()


def commit_version(library_path: str | Path, history: History, library: Library) -> None:
    """Save a library whose history commit is already done (e.g. `History.rollback`): step 4 only."""
    library.save(library_path)
    crash_point()


def recover(library_path: Path, history: History) -> str | None:
    """Repair what an interrupted commit left; returns what was done (also logged), or None."""
    stale = remove_stale_temps(library_path)
    if history.snapshot_dir.is_dir():  # a snapshot's temp file: .v0003.json.<random>.tmp
        snapshot_temps = list(history.snapshot_dir.glob(".v*.json.*.tmp"))
        for temp in snapshot_temps:
            temp.unlink(missing_ok=True)
        stale += snapshot_temps
    for temp in stale:
        logger.warning("removed %s left by an interrupted write", temp)
    _cut_torn_line(history.ops_path)
    versions = history.versions()
    if not versions or not library_path.is_file():
        return None
    library = Library.load(library_path)
    latest = versions[-1]
    if latest <= library.version or library.version not in versions:
        return None
    if _ids_texts(history.load(library.version)) != _ids_texts(library):
        return None  # the file is not a version of this history: leave it for the user
    restored = history.load(latest)
    restored.save(library_path)
    history.commit(restored, records=[{"kind": "recovered", "from": library.version}])
    message = f"{library_path}: an interrupted commit was completed (version {library.version} -> {latest})"
    logger.warning(message)
    return message


def _ids_texts(library: Library) -> list[tuple[str, str]]:
    return [(e.id, e.text) for e in library.experiences]


def _cut_torn_line(path: Path) -> None:
    """A kill mid-append can leave a last line without its newline: cut it, or the next append buries it."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    if data.endswith(b"\n"):
        return
    keep = data.rfind(b"\n") + 1
    with path.open("r+b") as handle:
        handle.truncate(keep)
    logger.warning("%s: cut a torn last line left by an interrupted append", path)


__all__ = ["commit_library", "commit_version", "open_library", "recover"]
