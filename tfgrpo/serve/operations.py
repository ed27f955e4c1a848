"""What an operator does to a deployment, from `tfgrpo deploy` or the admin routes alike: read its status,
propose a challenger (refused when it carries test-set material), promote it, roll it back, pause learning.

Every change goes through `Deployment`'s compare-and-swap and is an entry of the decision log naming who made
it ("operator USER" from the command line, "admin KEYHASH" from a route).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from tfgrpo.core.config import ConfigError
from tfgrpo.experiences import Library
from tfgrpo.serve.decider import read_test
from tfgrpo.serve.deploy_settings import DeploymentSettings
from tfgrpo.serve.deployment import Deployment, DeploymentState, StaleRevision
from tfgrpo.serve.live_library import Snapshot


class DeploymentRefused(ConfigError):
    """A change the deployment cannot make now (one line: why)."""


def propose(
    deployment: Deployment, library: Library, *, source: str, by: str, test_data: list[str]
) -> DeploymentState:
    """Put `library` under test, unless it contains a test set's answer or problem (lockout)."""
    leaks = leaked_test_material(library, test_data)
    if leaks:
        shown = "; ".join(leaks[:3]) + (f"; and {len(leaks) - 3} more" if len(leaks) > 3 else "")
        raise DeploymentRefused(f"challenger refused: it carries test-set material ({shown})")
    snapshot = Snapshot.of(library)
    try:
        return deployment.propose(library, snapshot.content_hash, source=source, by=by)
    except StaleRevision as exc:
        raise DeploymentRefused(f"cannot propose: {exc}") from None


def leaked_test_material(library: Library, test_data: list[str]) -> list[str]:
    """One line per experience that leaks a test problem (the bundled benchmarks and `test_data`)."""
    from tfgrpo.core.lockout import load_test_sets
    from tfgrpo.experiences.leakage import LeakageChecker

    checker = LeakageChecker(load_test_sets(test_data))
    return [finding.describe() for finding in checker.check_library(library) if finding.is_leak]


def promote_now(deployment: Deployment, *, by: str) -> DeploymentState:
    state = _state(deployment)
    if state.challenger is None:
        raise DeploymentRefused("no challenger under test: nothing to promote")
    return _checked(lambda: deployment.promote(state, rule="operator", by=by))


def rollback_now(deployment: Deployment, *, by: str) -> DeploymentState:
    """The challenger out when a test runs; else the champion before the current one back."""
    state = _state(deployment)
    if state.challenger is not None:
        return _checked(lambda: deployment.end_test(state, "rollback", rule="operator", by=by))
    return _checked(lambda: deployment.revert(state, by=by))


def set_paused(deployment: Deployment, paused: bool, *, by: str) -> DeploymentState:
    return _checked(lambda: deployment.pause_learning(paused, by=by))


def status(
    deployment: Deployment, engine: sa.Engine, settings: DeploymentSettings, reward_bounds: tuple[float, float]
) -> dict[str, Any]:
    """The deployment and, while a test runs, its bounds and what the rules say now."""
    state = _state(deployment)
    reading = read_test(engine, state, settings, reward_bounds)
    out: dict[str, Any] = {
        "revision": state.revision,
        "champion": state.champion,
        "challenger": state.challenger,
        "challenger_since": state.challenger_since,
        "learning_paused": state.learning_paused,
        "test": None,
    }
    if reading is not None:
        out["test"] = reading.evidence() | {
            "decision": {"action": reading.decision.action, "rule": reading.decision.rule},
            "guard_decision": {"action": reading.guard_decision.action, "rule": reading.guard_decision.rule},
        }
    return out


def _state(deployment: Deployment) -> DeploymentState:
    state = deployment.state()
    if state is None:
        raise DeploymentRefused("no deployment in this trace store: start serve with deployment.enabled first")
    return state


def _checked(change: Any) -> DeploymentState:
    try:
        state: DeploymentState = change()
    except StaleRevision as exc:
        raise DeploymentRefused(str(exc)) from None
    return state
