"""The host folders of the sandboxes (the `python` tool's, the code reward's): held by their live owner,
swept once it is dead.

Each python-tool session gets `<tmp>/tfgrpo-sandbox-XXXXXXXX`, each scored code candidate
`<tmp>/tfgrpo-code-XXXXXXXX` (and its test harness `tfgrpo-code-tests-XXXXXXXX`). Their owner (the tfgrpo
process) holds an exclusive
`flock` on the folder for as long as the session lives; the kernel drops the lock when the owner dies,
however it dies (`kill -9` included). The owner writes `OWNER_MARKER` only once it holds the lock, so
the marker says "this folder follows the protocol". A sweep (`remove_stale_folders`, on a tool's first
session of a run and a code reward's first batch) removes a marked folder only after taking its lock itself: a live owner's folder is
never touched, and folders without the marker (an older tfgrpo, or one killed in the microseconds
between creating and marking) are left alone.
"""

from __future__ import annotations

import fcntl
import glob
import logging
import os
import shutil
import stat
import tempfile
import time

logger = logging.getLogger(__name__)

#: the python tool's folders
FOLDER_PREFIX = "tfgrpo-sandbox-"
#: the code reward's folders (the candidate's and, `tfgrpo-code-tests-`, its harness's)
CODE_FOLDER_PREFIX = "tfgrpo-code-"
#: written (pid and start time, for people) once the owner holds the folder's lock
OWNER_MARKER = ".tfgrpo-owner"


class SandboxFolder:
    """A sandbox folder claimed by this process: locked, marked, and removed by `release()`."""

    def __init__(self, parent: str | None = None, prefix: str = FOLDER_PREFIX):
        self.path = tempfile.mkdtemp(prefix=prefix, dir=parent)
        self._lock_fd: int | None = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # unmarked yet: no sweep competes for it
            with open(os.path.join(self.path, OWNER_MARKER), "x", encoding="utf-8") as marker:
                marker.write(f"pid {os.getpid()} started {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n")
        except OSError:
            self.release()
            raise

    def __enter__(self) -> SandboxFolder:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def release(self) -> None:
        """Remove the folder, then drop the lock (idempotent)."""
        if self._lock_fd is None:
            return
        shutil.rmtree(self.path, ignore_errors=True)
        os.close(self._lock_fd)
        self._lock_fd = None


def remove_stale_folders(parent: str | None = None, prefix: str = FOLDER_PREFIX) -> list[str]:
    """Remove the sandbox folders named `prefix*` under `parent` (default: the temp dir) whose owner is dead;
    returns them."""
    removed = []
    for path in sorted(glob.glob(os.path.join(parent or tempfile.gettempdir(), glob.escape(prefix) + "*"))):
        if _remove_if_owner_dead(path):
            removed.append(path)
    if removed:
        logger.info("sandbox: removed %d folder(s) left by dead runs: %s", len(removed), ", ".join(removed))
    return removed


def _remove_if_owner_dead(path: str) -> bool:
    try:
        if not stat.S_ISREG(os.lstat(os.path.join(path, OWNER_MARKER)).st_mode):
            return False
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:  # unmarked, gone meanwhile, a symlink, or not ours to open
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # its owner is alive
            return False
        try:
            same_folder = os.path.samestat(os.stat(path, follow_symlinks=False), os.fstat(fd))
        except FileNotFoundError:  # another sweep removed it first
            return False
        if not same_folder:
            return False
        shutil.rmtree(path, ignore_errors=True)
        return not os.path.lexists(path)
    finally:
        os.close(fd)


__all__ = ["CODE_FOLDER_PREFIX", "FOLDER_PREFIX", "OWNER_MARKER", "SandboxFolder", "remove_stale_folders"]
