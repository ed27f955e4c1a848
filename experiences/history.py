"""Library history: an append-only operation log plus one snapshot per version, diff and rollback.

Layout of a history folder (by default `<library stem>.history/` beside the library file):

    ops.jsonl            one JSON record per line: applied / rejected / evicted / rollback / import ...,
                         each with the library version it produced, the engine step and a UTC time
    snapshots/v0003.json the whole library at version 3 (written atomically)

Nothing is ever rewritten: a rollback to version 3 writes a *new* version whose experiences are those
of version 3 (ids are not reused: `next_id` keeps growing), and logs it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from tfgrpo.core.atomic import append_lines, atomic_write_text
from tfgrpo.core.textfile import read_text
from tfgrpo.experiences.apply import ApplyResult
from tfgrpo.experiences.errors import ExperienceError, LibraryFileError, UnknownVersionError
from tfgrpo.experiences.model import Experience, Library

logger = logging.getLogger(__name__)


class Modified(BaseModel):
    id: str
    before: str
    after: str


class LibraryDiff(BaseModel):
    """What changed between two versions, by stable id."""

    from_version: int
    to_version: int
    added: list[Experience] = Field(default_factory=list)
    removed: list[Experience] = Field(default_factory=list)
    modified: list[Modified] = Field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.modified)

    def format(self) -> str:
        lines = [f"--- version {self.from_version}", f"+++ version {self.to_version}"]
        lines += [f"- [{e.id}]. {e.text}" for e in self.removed]
        for change in self.modified:
            lines += [f"~ [{change.id}]. {change.before}", f"  -> {change.after}"]
        lines += [f"+ [{e.id}]. {e.text}" for e in self.added]
        if self.empty:
            lines.append("(no changes)")
        return "\n".join(lines)


def diff_libraries(before: Library, after: Library) -> LibraryDiff:
    old = {e.id: e for e in before.experiences}
    new = {e.id: e for e in after.experiences}
    return LibraryDiff(
        from_version=before.version,
        to_version=after.version,
        added=[e for i, e in new.items() if i not in old],
        removed=[e for i, e in old.items() if i not in new],
        modified=[
            Modified(id=i, before=old[i].text, after=e.text)
            for i, e in new.items()
            if i in old and old[i].text != e.text
        ],
    )


class History:
    """Snapshots and the op log of one library."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.ops_path = self.directory / "ops.jsonl"
        self.snapshot_dir = self.directory / "snapshots"

    @classmethod
    def for_library(cls, library_path: str | Path) -> History:
        """The conventional history folder beside a library file: `run/library.json` -> `run/library.history/`."""
        path = Path(library_path)
        return cls(path.with_name(f"{path.stem}.history"))

    def exists(self) -> bool:
        return self.snapshot_dir.is_dir() and any(self.snapshot_dir.glob("v*.json"))

    # -- writing ---------------------------------------------------------------------------------------
    def commit(
        self,
        library: Library,
        *,
        records: Iterable[dict[str, Any]] = (),
        step: int | None = None,
        text: str | None = None,
    ) -> None:
        """Snapshot `library` (once per version) and append `records` to the op log, stamped with version/step/time.
        `text`: the library's `to_json()`, when the caller has rendered it already."""
        snapshot = self.snapshot_path(library.version)
        if snapshot.is_file() and _lessons(Library.load(snapshot)) != _lessons(library):
            raise ExperienceError(
                f"history {self.directory} already has a different library at version {library.version}; "
                "bump the version (apply_operations does) before committing"
            )
        # Same lessons, newer bookkeeping (usage counters, step): the snapshot keeps the latest.
        atomic_write_text(snapshot, library.to_json() if text is None else text)
        stamp = {"version": library.version, "step": step if step is not None else library.step, "time": _now()}
        append_lines(self.ops_path, [json.dumps({**stamp, **record}, ensure_ascii=False) for record in records])

    def commit_result(
        self, result: ApplyResult, *, step: int | None = None, extra: dict[str, Any] | None = None
    ) -> None:
        """Snapshot the new version of an apply and log what was applied, rejected and evicted."""
        records = [{**record, **(extra or {})} for record in result.log_records()]
        self.commit(result.library, records=records, step=step)

    def ensure_baseline(self, library: Library) -> None:
        """Snapshot a library that has no history yet (a hand-written or imported file), so it can be rolled back to."""
        if not self.snapshot_path(library.version).is_file():
            self.commit(library, records=[{"kind": "baseline", "experiences": len(library)}])

    def rollback(self, version: int, *, current: Library) -> Library:
        """A new version (current + 1) with the experiences of `version`; logged, and snapshotted."""
        target = self.load(version)
        restored = target.model_copy(
            deep=True, update={"version": current.version + 1, "next_id": max(current.next_id, target.next_id)}
        )
        self.ensure_baseline(current)
        self.commit(restored, records=[{"kind": "rollback", "to": version, "from": current.version}])
        return restored

    # -- reading ---------------------------------------------------------------------------------------
    def snapshot_path(self, version: int) -> Path:
        return self.snapshot_dir / f"v{version:04d}.json"

    def versions(self) -> list[int]:
        if not self.snapshot_dir.is_dir():
            return []
        return sorted(int(p.stem[1:]) for p in self.snapshot_dir.glob("v*.json") if p.stem[1:].isdigit())

    def load(self, version: int) -> Library:
        path = self.snapshot_path(version)
        if not path.is_file():
            known = ", ".join(map(str, self.versions())) or "none"
            raise UnknownVersionError(f"no snapshot of version {version} in {self.directory} (versions: {known})")
        return Library.load(path)

    def latest(self) -> Library | None:
        versions = self.versions()
        return self.load(versions[-1]) if versions else None

    def records(self, version: int | None = None) -> list[dict[str, Any]]:
        rows = read_jsonl(self.ops_path)
        return rows if version is None else [r for r in rows if r.get("version") == version]

    def diff(self, from_version: int, to_version: int) -> LibraryDiff:
        return diff_libraries(self.load(from_version), self.load(to_version))


def _lessons(library: Library) -> list[tuple[str, str]]:
    """What a version number stands for: the experiences' ids and texts, not their counters."""
    return [(e.id, e.text) for e in library.experiences]


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a JSONL file; a torn last line (a crash mid-append) is skipped with a warning."""
    path = Path(path)
    if not path.is_file():
        return []
    rows: list[dict[str, Any]] = []
    lines = read_text(path, error=LibraryFileError, max_bytes=1 << 40).splitlines()  # an op log may grow large
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if number == len(lines):
                logger.warning("%s: skipping a torn last line (interrupted write)", path)
                continue
            raise LibraryFileError(f"{path}: line {number} is not valid JSON") from None
    return rows


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


__all__ = ["History", "LibraryDiff", "Modified", "diff_libraries", "read_jsonl"]
