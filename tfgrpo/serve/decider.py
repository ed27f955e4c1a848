"""The decider: the running test's rewards read from the trace store, the sequential test and the error guard
(`tfgrpo.core.sequential`) run on them, and their decision made through the deployment's compare-and-swap.

What counts, per arm: the exchanges made since the test began (`challenger_since`), assigned arm B and served
the champion, or assigned arm C and served the challenger (by content hash: a request still in flight on an
earlier champion does not count for the new one). Assignment, not treatment, decides the side (intention to
treat): a client that sends `x-tfgrpo-inject: none` in arm C counts as C. Pinned exchanges (arm `pin`) and the
holdout (A) never count. A reward is the exchange's one current reward (`/v1/feedback` keeps one per exchange,
bound to its owner: `feedback.py`), so no rating is counted twice; a failed exchange carries no reward and
counts only for the guard. Observations are ordered by when their reward arrived (`feedback_at`): the order in
which the test saw them, which is the order a confidence sequence is valid in.

The guard looks at every exchange of either side, rewarded or not: a challenger whose upstream errors and
timeouts exceed the champion's by more than `guard_max_increase` (lower bound) is rolled back by "guard",
before the sequential test is asked. Each worker runs the decider; the compare-and-swap makes the decision once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from tfgrpo.core.sequential import (
    Decision,
    DifferenceBounds,
    Observation,
    SequentialInputError,
    decide,
    decide_guard,
    difference_bounds,
)
from tfgrpo.core.sequential import guard_bounds as failure_bounds
from tfgrpo.serve.arms import CHALLENGER, LIBRARY
from tfgrpo.serve.deploy_settings import DeploymentSettings
from tfgrpo.serve.deployment import Deployment, DeploymentState, StaleRevision
from tfgrpo.serve.observe import log_event
from tfgrpo.serve.traces import EXCHANGES

SEQUENTIAL = "sequential test"
GUARD = "guard"


@dataclass(frozen=True)
class ArmData:
    """The running test's exchanges, per side: rewards (in the order they arrived) and failures."""

    champion: list[Observation] = field(default_factory=list)
    challenger: list[Observation] = field(default_factory=list)
    champion_failures: list[bool] = field(default_factory=list)
    challenger_failures: list[bool] = field(default_factory=list)


@dataclass(frozen=True)
class Reading:
    """The test as it stands: its data, both bounds and what each rule says."""

    state: DeploymentState
    data: ArmData
    bounds: DifferenceBounds
    decision: Decision
    guard: DifferenceBounds
    guard_decision: Decision

    def evidence(self) -> dict[str, Any]:
        """What the decision log keeps: n per arm and the bounds at the decision."""
        return {
            "n_champion": self.bounds.n_champion,
            "n_challenger": self.bounds.n_challenger,
            "n_pairs": self.bounds.n_pairs,
            "kind": self.bounds.kind,
            "lower": self.bounds.lower,
            "upper": self.bounds.upper,
            "estimate": self.bounds.estimate,
            "guard": {
                "champion_exchanges": len(self.data.champion_failures),
                "challenger_exchanges": len(self.data.challenger_failures),
                "lower": self.guard.lower,
                "upper": self.guard.upper,
                "estimate": self.guard.estimate,
            },
        }

    def gauges(self) -> tuple[dict[str, float], dict[str, int]]:
        """The bounds and sample counts /metrics shows (`ServeMetrics.test_reading`)."""
        bounds = {"lower": self.bounds.lower, "upper": self.bounds.upper, "estimate": self.bounds.estimate}
        bounds |= {"guard_lower": self.guard.lower, "guard_upper": self.guard.upper}
        return bounds, {"B": self.bounds.n_champion, "C": self.bounds.n_challenger}


def arm_data(engine: sa.Engine, state: DeploymentState) -> ArmData:
    """The exchanges of the test `state` runs (empty when none runs)."""
    data = ArmData()
    if state.challenger is None or state.challenger_since is None:
        return data
    c = EXCHANGES.c
    query = (
        sa.select(c.arm, c.library_hash, c.prompt_key, c.reward, c.feedback_at, c.status, c.error)
        .where(EXCHANGES.c.created_at >= state.challenger_since, EXCHANGES.c.arm.in_([LIBRARY, CHALLENGER]))
        .order_by(EXCHANGES.c.created_at)
    )
    sides = {(LIBRARY, state.champion): "champion", (CHALLENGER, state.challenger): "challenger"}
    with engine.connect() as connection:
        for arm, version, prompt_key, reward, feedback_at, status, error in connection.execute(query):
            side = sides.get((arm, version))
            if side is None:
                continue
            failed = error is not None or status >= 400
            getattr(data, f"{side}_failures").append(failed)
            if reward is not None and not failed:
                getattr(data, side).append(Observation(prompt_key, float(reward), float(feedback_at)))
    data.champion.sort(key=lambda observation: observation.created_at)
    data.challenger.sort(key=lambda observation: observation.created_at)
    return data


def read_test(
    engine: sa.Engine, state: DeploymentState, settings: DeploymentSettings, reward_bounds: tuple[float, float]
) -> Reading | None:
    """The running test's bounds and what its rules say; None when no test runs."""
    if state.challenger is None:
        return None
    data = arm_data(engine, state)
    alpha = settings.test.alpha
    low, high = reward_bounds
    bounds = difference_bounds(data.champion, data.challenger, alpha=alpha, low=low, high=high)
    guard = failure_bounds(data.champion_failures, data.challenger_failures, alpha=alpha)
    return Reading(
        state=state,
        data=data,
        bounds=bounds,
        decision=decide(bounds, settings.test),
        guard=guard,
        guard_decision=decide_guard(guard, settings.guard_max_increase),
    )


def act(deployment: Deployment, reading: Reading) -> DeploymentState | None:
    """Make the decision the reading calls for (the guard first); None when there is none to make, or when
    another worker changed the deployment first (its decision stands)."""
    state, evidence = reading.state, reading.evidence()
    try:
        if reading.guard_decision.action == "rollback":
            rule = reading.guard_decision.rule
            return deployment.end_test(state, "rollback", rule=rule, by=GUARD, evidence=evidence)
        action, rule = reading.decision.action, reading.decision.rule
        if action == "promote":
            return deployment.promote(state, rule=rule, by=SEQUENTIAL, evidence=evidence)
        if action in ("rollback", "stop"):
            return deployment.end_test(state, action, rule=rule, by=SEQUENTIAL, evidence=evidence)
    except StaleRevision:
        return None
    return None


class Decider:
    """One worker's decider: every `decide_interval_s`, the test read and, when a rule fires, decided."""

    def __init__(
        self,
        deployment: Deployment,
        engine: sa.Engine,
        settings: DeploymentSettings,
        reward_bounds: tuple[float, float],
        *,
        on_reading: Callable[[Reading | None], None] | None = None,
        on_decision: Callable[[str, str], None] | None = None,
    ):
        self.deployment = deployment
        self.engine = engine
        self.settings = settings
        self.reward_bounds = reward_bounds
        self.on_reading = on_reading
        self.on_decision = on_decision

    def step(self) -> DeploymentState | None:
        """Read the test once and decide if a rule fires; the new state when this worker decided."""
        state = self.deployment.state()
        reading = None if state is None else read_test(self.engine, state, self.settings, self.reward_bounds)
        if self.on_reading is not None:
            self.on_reading(reading)
        if reading is None:
            return None
        decided = act(self.deployment, reading)
        if decided is not None:
            entry = self.deployment.decisions(limit=1)[-1]
            log_event("deployment_decision", action=entry["action"], rule=entry["rule"], by=entry["decided_by"])
            if self.on_decision is not None:
                self.on_decision(entry["action"], entry["decided_by"])
        return decided

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.settings.decide_interval_s)
            try:
                await asyncio.to_thread(self.step)
            except sa.exc.SQLAlchemyError as exc:  # the database away for a moment: the next round tries again
                log_event("decider_failed", logging.WARNING, error=f"{type(exc).__name__}"[:200])
            except SequentialInputError as exc:  # a stored reward outside reward_min..reward_max: said, not fatal
                log_event("decider_failed", logging.WARNING, error=str(exc).splitlines()[0][:300])
