"""Crash-safe file writes: write a temporary file beside the target, fsync it, then rename over the target.

`os.replace` is atomic on POSIX and Windows, so a reader (or a crash at any instant) sees either the old
file or the new one, never a torn mix. The replacement keeps the old file's permission bits (a new file
gets the umask's). Appends to JSONL logs write whole lines in one call; a reader skips a torn last line
left by a crash (see `history.read_jsonl`).

Read-modify-write of a shared file goes through `locked(path)`: an advisory lock (the `filelock`
library) on `<path>.lock`, so a second writer waits (or fails with a clear message) instead of losing
an update. `remove_stale_temps` deletes the temp files a killed writer left (call it under the lock).
`removed_on_failure(folder)` deletes a folder a failed command created, so bad input leaves nothing behind.
`file_target` / `folder_target` refuse, before any work, an output path that cannot be written: a file where a
folder is needed, a folder where a file is, or a file among its parents.

`crash_point()` is fault injection for tests: with TFGRPO_TEST_CRASH_AT=N in the environment the
process exits (os._exit) at the N-th crash point it passes, so a test can kill a commit at every step.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock, Timeout

CRASH_ENV = "TFGRPO_TEST_CRASH_AT"
CRASH_EXIT_CODE = 86
LOCK_TIMEOUT_S = 60.0
_crash_points_passed = [0]  # per process; only read when CRASH_ENV is set


class LockTimeoutError(ValueError):
    """Another process holds the lock of a file longer than we were willing to wait (printed as one line by the CLI)."""


def crash_point() -> None:
    """Test hook: exit here without cleanup when this is the N-th point passed (N from TFGRPO_TEST_CRASH_AT)."""
    target = os.environ.get(CRASH_ENV)
    if not target:
        return
    _crash_points_passed[0] += 1
    if _crash_points_passed[0] == int(target):
        os._exit(CRASH_EXIT_CODE)


def lock_path(path: str | Path) -> Path:
    path = Path(path)
    return path.with_name(path.name + ".lock")


@contextlib.contextmanager
def locked(path: str | Path, *, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold the advisory lock of `path` (waiting up to `timeout_s`; 0 = fail at once if it is held)."""
    target = lock_path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(target))
    try:
        lock.acquire(timeout=timeout_s)
    except Timeout:
        waited = f" after waiting {timeout_s:g} s" if timeout_s > 0 else ""
        raise LockTimeoutError(
            f"{path} is being changed by another process (lock {target} is held){waited}; "
            "try again when it has finished"
        ) from None
    try:
        yield
    finally:
        lock.release()


def remove_stale_temps(path: str | Path) -> list[Path]:
    """Delete temp files of `path` left by a killed `atomic_write_text` (only safe under `locked(path)`)."""
    path = Path(path)
    if not path.parent.is_dir():
        return []
    stale = list(path.parent.glob(f".{path.name}.*.tmp"))
    for temp in stale:
        temp.unlink(missing_ok=True)
    return stale


def _mode_for(path: Path) -> int:
    """The permission bits the replacement should get: the old file's, else what open() would give."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return 0o666 & ~_umask()


def _umask() -> int:
    # os.umask() can only be read by setting it (racy with threads): read it from /proc where possible.
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o022


def atomic_write_text(path: str | Path, text: str) -> None:
    """Replace `path` with `text` atomically (temp file in the same folder + fsync + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = _mode_for(path)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        crash_point()  # the temp file is complete, the target not yet replaced
        os.replace(tmp_name, path)
    except BaseException:
        # The target is untouched; only our own temporary file needs removing.
        Path(tmp_name).unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)


def append_lines(path: str | Path, lines: list[str]) -> None:
    """Append complete lines in one write (no partial records from interleaving), then fsync."""
    if not lines:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = "".join(line.rstrip("\n") + "\n" for line in lines)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(payload)
        handle.flush()
        os.fsync(handle.fileno())


@contextlib.contextmanager
def removed_on_failure(folder: str | Path) -> Iterator[None]:
    """Delete `folder` (and any missing parent the block created) if it did not exist and the block fails;
    a folder that existed before is left alone."""
    folder = Path(folder)
    created = folder
    for parent in folder.parents:  # the topmost folder that does not exist yet is the one to remove
        if parent.exists():
            break
        created = parent
    existed = created.exists()
    try:
        yield
    except BaseException:
        if not existed:
            shutil.rmtree(created, ignore_errors=True)
        raise


def file_target(path: str | Path, error: type[Exception]) -> Path:
    """`path` can be written as a file: it is not a folder and no parent of it is a file; else `error`."""
    path = Path(path)
    if path.is_dir():
        raise error(f"{path} is a folder; give a file path")
    _no_file_above(path, error)
    return path


def folder_target(path: str | Path, error: type[Exception]) -> Path:
    """`path` is, or can be created as, a folder: neither it nor a parent of it is a file; else `error`."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise error(f"{path} is a file; give a folder (an existing one or a new name)")
    _no_file_above(path, error)
    return path


def _no_file_above(path: Path, error: type[Exception]) -> None:
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise error(f"{path}: {parent} is a file, so nothing can be created under it")
            return


def _fsync_directory(directory: Path) -> None:
    # Makes the rename itself durable; not supported everywhere (e.g. Windows), where it is skipped.
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)
