"""The learner's run directory, and the state that lets a restarted learner carry on where it stopped.

    RUN/config.yaml              resolved settings (API keys hidden)
    RUN/state.json               the cursor, the prompts waiting for a round, every round, the ledger
    RUN/skipped.jsonl            every exchange read and not learned from: its id and why (never its text)
    RUN/events.log               what happened, one line each
    RUN/learner.lock             held by the one learner working on the run
    RUN/rounds/NNNN/champion.json  the champion library the round started from
    RUN/rounds/NNNN/problems.jsonl the prompts it learned from
    RUN/rounds/NNNN/learn/       the round's `tfgrpo learn` run (its library.json, metrics.json, cache.sqlite)

The cursor and the waiting prompts are saved together, atomically, after every read, so an exchange is
read once however often the learner restarts; `skipped.jsonl` is cut back to the size the state records,
so a crash between its append and the state's write writes no line twice. A round is saved as `learning`
before its first request: a restart resumes that learn run, whose response cache pays for nothing twice.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from filelock import FileLock, Timeout
from pydantic import BaseModel, Field

from tfgrpo.core.atomic import append_lines, atomic_write_text, folder_target
from tfgrpo.core.config import ConfigError, dump_config
from tfgrpo.live.config import LearnerConfig

RoundStatus = Literal["learning", "learned", "proposed", "unchanged", "stale", "refused"]


class Round(BaseModel):
    """One learn run from the champion, and what became of its library."""

    number: int
    status: RoundStatus = "learning"
    champion: str = Field(description="Content hash of the champion it started from.")
    challenger: str | None = Field(None, description="Content hash of the library it learned (None: not yet).")
    problems: int = 0
    rewarded: int = Field(0, description="Rewarded exchanges behind its prompts.")
    started_at: float = 0.0
    ended_at: float | None = None
    cost_usd: float = 0.0
    usage: dict[str, Any] = Field(default_factory=dict, description="Tokens of the round's learn run (all sessions).")
    message: str = ""


class LearnerState(BaseModel):
    ground_truth: bool = Field(description="The cursor's kind (feedback or exchanges): fixed for the run.")
    cursor: dict[str, Any] = Field(default_factory=dict, description="intake.Cursor's fields.")
    pending: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Prompt key -> problem waiting for the next round, oldest first."
    )
    pending_rewarded: int = 0
    since: float = Field(default_factory=time.time, description="When the last round began (or the learner did).")
    rounds: list[Round] = Field(default_factory=list)
    read: int = Field(0, description="Trace rows read.")
    skipped: int = 0
    malformed: int = 0
    locked_out: int = 0
    dropped: int = Field(0, description="Waiting prompts dropped, oldest first, to keep at most max_problems.")
    skipped_bytes: int = Field(0, description="Size of skipped.jsonl at the last save.")

    @property
    def cost_usd(self) -> float:
        """What every round cost, in the client layer's accounting (each round's learn run records its own)."""
        return round(sum(r.cost_usd for r in self.rounds), 8)


class LearnerRunDir:
    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.state_path = self.root / "state.json"
        self.skipped_path = self.root / "skipped.jsonl"
        self.events_path = self.root / "events.log"
        self.lock_path = self.root / "learner.lock"
        self._lock: FileLock | None = None

    def round_dir(self, number: int) -> Path:
        return self.root / "rounds" / f"{number:04d}"

    def open(self, config: LearnerConfig) -> LearnerState:
        """Take the run (one learner at a time) and return its state: saved, or fresh."""
        folder_target(self.root, ConfigError)
        if self.root.exists() and not self.root.is_dir():
            raise ConfigError(f"--out {self.root} is a file; the learner needs a directory")
        self.root.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(self.lock_path))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            raise ConfigError(
                f"{self.root} is in use by another `tfgrpo learner` ({self.lock_path} is held)"
            ) from None
        self._lock = lock
        atomic_write_text(self.root / "config.yaml", dump_config(config))
        if not self.state_path.is_file():
            state = LearnerState(ground_truth=config.ground_truth)
            self.save(state)  # the run's kind is fixed from its first start on
            return state
        state = LearnerState.model_validate_json(self.state_path.read_text(encoding="utf-8"))
        if state.ground_truth != config.ground_truth:
            raise ConfigError(
                f"{self.root} learns with ground_truth={str(state.ground_truth).lower()}: its cursor follows "
                f"{'feedback' if state.ground_truth else 'exchanges'}; use another --out to change it"
            )
        self._cut_skipped(state.skipped_bytes)
        return state

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def save(self, state: LearnerState, skipped: Sequence[dict[str, Any]] = ()) -> None:
        """Append the new skips, then write the state that counts them (the state is what a restart trusts)."""
        append_lines(self.skipped_path, [json.dumps(entry, ensure_ascii=False) for entry in skipped])
        state.skipped_bytes = self.skipped_path.stat().st_size if self.skipped_path.exists() else 0
        atomic_write_text(self.state_path, state.model_dump_json(indent=1))

    def log(self, line: str) -> None:
        append_lines(self.events_path, [f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {line}"])

    def _cut_skipped(self, size: int) -> None:
        if self.skipped_path.exists() and self.skipped_path.stat().st_size > size:
            with open(self.skipped_path, "r+b") as handle:
                handle.truncate(size)
                handle.flush()
                os.fsync(handle.fileno())


__all__ = ["LearnerRunDir", "LearnerState", "Round", "RoundStatus"]
