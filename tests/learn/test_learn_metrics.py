"""metrics.json's totals sum every counter a step has, a counter added later included, and never what a
step says about itself (its number, epoch, library version and size)."""

from __future__ import annotations

from dataclasses import fields

from tfgrpo.experiences.model import Library
from tfgrpo.learn.config import LearnConfig
from tfgrpo.learn.metrics import STEP_IDENTITY, StepCounters, run_metrics
from tfgrpo.learn.rundir import RunState


def _step(number: int) -> dict:
    counters = StepCounters(step=number, epoch=1, batch=number, queries=0)
    for f in fields(StepCounters):
        if f.type == "int" and f.name not in STEP_IDENTITY:
            setattr(counters, f.name, number)  # step 1 counts 1 of everything, step 2 counts 2
    counters.consolidation_failed = number == 2
    counters.library_version, counters.library_size = 10 * number, 10 * number
    return counters.as_dict()


def test_totals_sum_every_counter_of_the_steps():
    state = RunState(steps=[_step(1), _step(2)], completed_step=2)
    totals = run_metrics(state, best_epoch=None, library=Library(), config=LearnConfig(data="aime24"))["totals"]
    counters = [f.name for f in fields(StepCounters) if f.type == "int" and f.name not in STEP_IDENTITY]
    assert len(counters) >= 39 and {name: totals[name] for name in counters} == dict.fromkeys(counters, 3)
    assert totals["consolidation_failed"] == 1  # a flag counts the steps it was set on
    assert totals["steps"] == 2 and (totals["library_version"], totals["library_size"]) == (0, 0)  # the library's
    assert totals["accuracy"] == 1.0  # 3 correct of 3 scored
