"""A step written to the run directory, in the next step's network wait.

Writing a step (its rollout and stage rows, the library's snapshots and history, the run state: about 15
fsyncs) took 6-10 ms a step on the steps workload (2-core AMD EPYC), on a disk whose fsync is cheap, and more
where it is not, and the next step's first requests waited for it. So `StepCommits` holds a finished step and
writes it once the next step's rollouts are on the wire (`WhenIdle`), in the wait for their replies. It is
written before anything else is: when the first query of the next step has its rollouts at the latest
(before any summary is asked for), before the next step is held, before an epoch's validation, and when the
run ends, fails or is interrupted (`flush`). An epoch's end without validation is saved with it (the write
saves the run state as it is then). A write that fails stops the run, and nothing is written after it.
Nothing the run paid for waits with it: the step's replies are in the response cache already, so a run
killed before its step is written redoes that step from the cache (`--resume`), as it would have a moment
earlier.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from tfgrpo.learn.guards import history_records
from tfgrpo.rollout.warmup import WhenIdle

if TYPE_CHECKING:
    from experiences.model import Library
    from tfgrpo.learn.groups import Group
    from tfgrpo.learn.metrics import StepCounters
    from tfgrpo.learn.rundir import RunDir, RunState
    from tfgrpo.learn.step import StepOutputs, StepPlan
    from tfgrpo.rollout.sampling import Rollout


class StepCommits:
    """At most one finished step waiting to be written; written in order, each error raised by `flush`."""

    def __init__(self) -> None:
        self._held: Callable[[], None] | None = None
        self._error: Exception | None = None

    @property
    def holding(self) -> bool:
        """A finished step is waiting to be written."""
        return self._held is not None

    def hold(self, write: Callable[[], None]) -> None:
        """Keep `write` (a step's commit) for the next wave's wait; the one held before is written first."""
        self.flush()
        self._held = write

    @contextlib.contextmanager
    def written_in_wait(self) -> Iterator[None]:
        """Around a wave of requests: the held step is written once they are on the wire, or when the block ends."""
        waiting = WhenIdle(self._write_quietly) if self._held is not None else None
        try:
            yield
        finally:
            if waiting is not None:
                waiting.cancel()
            self.flush()

    def flush(self) -> None:
        """Write the held step now (if it was not written yet); raise what writing it raised, then and at every
        later flush or hold: nothing is written after a step that was not, so the run directory has no gap."""
        self._write_quietly()
        if self._error is not None:
            raise self._error

    def _write_quietly(self) -> None:
        # On the event loop as a plain callback (WhenIdle), where an exception would only be logged: kept for
        # `flush` to raise where the run can stop on it.
        write, self._held = self._held, None
        if write is None or self._error is not None:
            return
        try:
            write()
        except Exception as exc:
            self._error = exc


def write_step(
    run: RunDir,
    console: Any,
    plan: StepPlan,
    state: RunState,
    counters: StepCounters,
    before: Library,
    after: Library,
    outputs: StepOutputs,
    gate_records: list[dict[str, Any]],
) -> None:
    """Write the step (library, rollouts, stage replies, metrics, history) to the run directory at once."""
    context = {"epoch": plan.epoch, "step": plan.step, "batch": plan.batch}
    consolidation, applied = outputs.consolidation, outputs.applied
    run.commit_step(
        state,
        step=plan.step,
        library=after,
        rollout_rows=[rollout_row(run, g, r, before, plan) for g in outputs.groups for r in g.rollouts],
        stage_rows={
            "summaries": [{**context, **s.to_row()} for s in outputs.summaries],
            "group_ops": [{**context, **a.to_row()} for a in outputs.analyses],
            "consolidation": [{**context, **consolidation.to_row(), "apply": applied.log_records()}]
            if consolidation.reply
            else [],
        },
        step_metrics=counters.as_dict(),
        library_records=history_records(outputs.screened)
        + (gate_records or [*applied.log_records(), *outputs.retired]),
    )
    run.log(counters.one_line())
    console.print(counters.one_line(), highlight=False)


def rollout_row(run: RunDir, group: Group, rollout: Rollout, library: Library, plan: StepPlan) -> dict[str, Any]:
    return {
        "run": run.root.name,
        "epoch": plan.epoch,
        "step": plan.step,
        "batch": plan.batch,
        "problem": group.problem.problem,
        "answer": group.problem.answer,
        **rollout.to_row(),
        "library_version": library.version,
        "group_mean": group.mean,
        "group_std": group.std,
        "group_status": group.status,
        "pseudo_label": group.gold if group.gold_is_pseudo else None,
    }


__all__ = ["StepCommits", "rollout_row", "write_step"]
