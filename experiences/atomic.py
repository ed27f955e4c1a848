"""Crash-safe file writes: write a temporary file beside the target, fsync it, then rename over the target.

`os.replace` is atomic on POSIX and Windows, so a reader (or a crash at any instant) sees either the old
file or the new one, never a torn mix. Appends to JSONL logs write whole lines in one call; a reader
skips a torn last line left by a crash (see `history.read_jsonl`).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write_text(path: str | Path, text: str) -> None:
    """Replace `path` with `text` atomically (temp file in the same folder + fsync + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
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
