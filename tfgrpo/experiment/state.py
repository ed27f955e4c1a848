"""`experiment.json`: which steps finished with which fingerprint, what each cost and how long it took.

Written atomically after every change, so a kill -9 at any moment leaves either the old or the new file.
A step counts as complete only when it is recorded `done` with the fingerprint the plan has now. A fine-tuned
baseline that could not be trained or evaluated is recorded `failed` with the reason: the table marks its
row, and the next run of the command tries it again.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from tfgrpo.core.atomic import atomic_write_text

STATE_FILE = "experiment.json"


class StepRecord(BaseModel):
    fingerprint: str
    status: str  # started | done | failed
    cost_usd: float = 0.0
    wall_s: float = 0.0
    cpu_s: float | None = None  # CPU time of this process (all its threads) while the step ran
    message: str = ""  # why a failed step failed
    started: str = ""
    finished: str | None = None


class ExperimentState(BaseModel):
    recipe: str = ""
    steps: dict[str, StepRecord] = Field(default_factory=dict)
    runs: list[dict[str, Any]] = Field(
        default_factory=list, description="One entry per invocation: what ran, what was skipped."
    )

    @classmethod
    def load(cls, out: Path) -> ExperimentState:
        path = out / STATE_FILE
        return cls.model_validate_json(path.read_text(encoding="utf-8")) if path.is_file() else cls()

    def save(self, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / STATE_FILE, self.model_dump_json(indent=2))

    def is_done(self, step_id: str, fingerprint: str) -> bool:
        record = self.steps.get(step_id)
        return record is not None and record.status == "done" and record.fingerprint == fingerprint

    def mark_started(self, step_id: str, fingerprint: str) -> None:
        previous = self.steps.get(step_id)
        keep_started = previous is not None and previous.fingerprint == fingerprint
        # Same settings: what earlier attempts of this step spent still counts against the budget.
        self.steps[step_id] = StepRecord(
            fingerprint=fingerprint,
            status="started",
            started=previous.started if keep_started else _now(),
            cost_usd=previous.cost_usd if keep_started else 0.0,
        )

    def record_cost(self, step_id: str, cost_usd: float, *, cumulative: bool) -> None:
        """`cumulative`: the step reports its total over all attempts (a learn run); else this attempt's spend."""
        record = self.steps[step_id]
        record.cost_usd = cost_usd if cumulative else record.cost_usd + cost_usd

    def mark_done(self, step_id: str, *, wall_s: float, cpu_s: float | None = None) -> None:
        record = self.steps[step_id]
        record.status, record.wall_s, record.cpu_s, record.finished = "done", wall_s, cpu_s, _now()

    def mark_failed(self, step_id: str, message: str, *, wall_s: float, cpu_s: float | None = None) -> None:
        record = self.steps[step_id]
        record.status, record.message, record.wall_s, record.cpu_s = "failed", message, wall_s, cpu_s
        record.finished = _now()

    def failure(self, step_id: str) -> str | None:
        """Why the step failed in its last attempt, or None when it did not."""
        record = self.steps.get(step_id)
        if record is None or record.status != "failed":
            return None
        return record.message or "failed"

    def spent_usd(self, steps: list[str], *, excluding: str | None = None) -> float:
        """Spend of these steps as they stand (a step rerun with new settings starts again from $0)."""
        return sum(self.steps[key].cost_usd for key in steps if key in self.steps and key != excluding)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")


__all__ = ["ExperimentState", "STATE_FILE", "StepRecord"]
