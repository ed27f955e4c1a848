"""Checks of a reward's parameters, run when the reward is built.

Parameters come from code, YAML or `tfgrpo score -p KEY=VALUE` (a YAML scalar: `timeout_s=abc` is a string).
A bad one fails at once, in one line naming the reward and the parameter, instead of on every row scored, as a
Python `TypeError`, or not at all (`fullmatch=maybe` would be truthy).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tfgrpo.rewards.errors import RewardError


def number(reward: str, name: str, value: Any, *, minimum: float = 0.0, inclusive: bool = False) -> float:
    """A finite real number above `minimum` (or at least it, with `inclusive`)."""
    bound = f">= {minimum:g}" if inclusive else f"> {minimum:g}"
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RewardError(f"{reward} reward: {name} must be a finite number {bound}, got {value!r}")
    if value < minimum or (value == minimum and not inclusive):
        raise RewardError(f"{reward} reward: {name} must be {bound}, got {value!r}")
    return float(value)


def share(reward: str, name: str, value: Any) -> float:
    """A fraction in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise RewardError(f"{reward} reward: {name} must be a number in [0, 1], got {value!r}")
    return float(value)


def count(reward: str, name: str, value: Any) -> int:
    """A whole number >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RewardError(f"{reward} reward: {name} must be a whole number >= 1, got {value!r}")
    return value


def optional_count(reward: str, name: str, value: Any) -> int | None:
    """A whole number >= 1, or None (the reward's default)."""
    return None if value is None else count(reward, name, value)


def flag(reward: str, name: str, value: Any) -> bool:
    """true or false (YAML's `true` / `false`), never a truthy string or number."""
    if not isinstance(value, bool):
        raise RewardError(f"{reward} reward: {name} must be true or false, got {value!r}")
    return value


def choice(reward: str, name: str, value: Any, choices: Sequence[str]) -> str:
    """One of `choices`."""
    if value not in choices:
        raise RewardError(f"{reward} reward: {name} must be one of {', '.join(choices)}, got {value!r}")
    return str(value)


__all__ = ["choice", "count", "flag", "number", "optional_count", "share"]
