"""Stages 0-2 of a step run per query: each query goes on to its next stage as soon as its own previous one is
done, and `StageTracker` keeps the step's view of the stages (bars, stage times) as if they ran one at a time.

A stage-by-stage step waited for the batch's slowest rollout before any summary left, and for the slowest
summary before any group analysis: with a provider whose latencies vary, every stage paid its straggler,
and even with a steady one every wave's requests were prepared after the last reply of the one before.
Run per query, a query's summaries are on the wire while other queries' rollouts are still being answered
or read. The requests are the same ones (same prompts, same cache keys), so results and `--resume` do not
change; the consolidation (stage 3) still waits for every query.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tfgrpo.learn.groups import Group
    from tfgrpo.learn.metrics import StepCounters
    from tfgrpo.learn.stages.advantage import GroupAnalysis
    from tfgrpo.learn.stages.summarize import Summary

#: the stages a query goes through before the consolidation, in order, as `StepCounters.stage_seconds` names them
STAGES = ("rollouts", "summaries", "group_advantage")


@dataclass
class QueryOutcome:
    """What stages 0-2 made of one query: its group, its summaries (kept groups) and its analysis (if any)."""

    group: Group
    summaries: list[Summary] = field(default_factory=list)
    analysis: GroupAnalysis | None = None


class StageTracker:
    """One progress bar per stage, and each stage's time in `counters` once the last query has left it.

    A stage's time is measured from the end of the stage before (the step's start for the rollouts) to the
    moment its last query finished it, so the three still add up to the time before the consolidation.
    The rollouts' bar knows its total; the summaries' and analyses' grow as queries reach them."""

    def __init__(self, progress: Any, label: str, counters: StepCounters, *, queries: int, group_size: int) -> None:
        self._progress, self._counters = progress, counters
        self._left = dict.fromkeys(STAGES, queries)
        self._bars = {
            "rollouts": progress.add_task(f"{label} · rollouts", total=queries * group_size),
            "summaries": progress.add_task(f"{label} · summaries", total=0),
            "group_advantage": progress.add_task(f"{label} · group advantage", total=0),
        }

    def expect(self, stage: str, count: int) -> None:
        """`count` more items of `stage` to come (a kept group's summaries, a group's analysis)."""
        task = self._progress.tasks[self._progress.task_ids.index(self._bars[stage])]
        self._progress.update(self._bars[stage], total=(task.total or 0) + count)

    def advance(self, stage: str, count: int = 1) -> None:
        self._progress.advance(self._bars[stage], count)

    def query_done(self, stage: str) -> None:
        """One query has finished `stage` (or skipped it); the last one records the stage's time."""
        self._left[stage] -= 1
        if self._left[stage] == 0:
            self._counters.lap(stage)

    def close(self) -> None:
        for task_id in self._bars.values():
            self._progress.remove_task(task_id)


__all__ = ["STAGES", "QueryOutcome", "StageTracker"]
