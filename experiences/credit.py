"""Credit: the measured effect of one experience on the reward, with a confidence interval.

`tfgrpo learn` leaves each experience out of a rollout's prompt at random (`tfgrpo.learn.credit`), so for
one query some rollouts had the experience in context and some did not, and nothing but the coin decided
which. The difference of their mean rewards is an unbiased estimate of what the experience does for that
query. `Credit` accumulates those per-query differences d_g over steps and epochs, each weighted by
w_g = n_with * n_without / (n_with + n_without) (1 / variance of d_g up to a common factor), and gives their
weighted mean with a Student-t interval:

    effect = sum(w d) / sum(w)
    se^2   = max(sum(w (d - effect)^2) / (k - 1), s^2) / sum(w)     k = queries with both kinds of rollouts

where s^2 is the variance of the rollouts' rewards: with few queries, their differences can agree by chance,
and the rewards' own noise bounds the error from below.

A credit belongs to an experience's text: a modify or merge starts a new one (a modify can turn "37" into
"73", and what the old text did says nothing about the new one); the old one stays in the history's
snapshot of the version before.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field, model_validator

_DERIVED = frozenset({"effect", "low", "high"})
Verdict = Literal["helps", "hurts", "unclear", "untested"]
#: Fewer queries than this with rollouts both with and without an experience give no verdict: a Student-t
#: interval over two or three differences of 0/1 rewards is too often degenerate.
DEFAULT_MIN_GROUPS = 4
DEFAULT_LEVEL = 0.95


class Credit(BaseModel):
    """Rollouts of the same query with and without this experience in context, compared (see the module doc)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    groups: int = Field(0, ge=0, description="Queries with rollouts both with and without it in context.")
    with_rollouts: int = Field(0, ge=0, description="Rollouts of those queries that had it in context.")
    without_rollouts: int = Field(0, ge=0, description="Rollouts of those queries that had it left out.")
    weight: float = Field(0.0, ge=0.0, description="Sum of the queries' weights w.")
    weighted_effect: float = Field(0.0, description="Sum of w * d (d: mean reward with minus without).")
    weighted_square: float = Field(0.0, ge=0.0, description="Sum of w * d^2.")
    reward_sum: float = Field(0.0, description="Sum of the rewards of those rollouts.")
    reward_square_sum: float = Field(0.0, ge=0.0, description="Sum of their squares.")

    @model_validator(mode="before")
    @classmethod
    def _drop_derived(cls, data: object) -> object:
        # a saved or exported library carries effect/low/high for its readers: derived, so recomputed
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if k not in _DERIVED}
        return data

    def add(self, with_rewards: Sequence[float], without_rewards: Sequence[float]) -> None:
        """One query's rollouts with and without the experience (both non-empty, else nothing is learned)."""
        if not with_rewards or not without_rewards:
            return
        n_with, n_without = len(with_rewards), len(without_rewards)
        difference = sum(with_rewards) / n_with - sum(without_rewards) / n_without
        weight = n_with * n_without / (n_with + n_without)
        self.groups += 1
        self.with_rollouts += n_with
        self.without_rollouts += n_without
        self.weight += weight
        self.weighted_effect += weight * difference
        self.weighted_square += weight * difference * difference
        self.reward_sum += sum(with_rewards) + sum(without_rewards)
        self.reward_square_sum += sum(r * r for r in with_rewards) + sum(r * r for r in without_rewards)

    @computed_field(description="Mean reward with it in context minus without it.")  # type: ignore[prop-decorator]
    @property
    def effect(self) -> float | None:
        return round(self.weighted_effect / self.weight, 6) if self.weight > 0 else None

    @computed_field(description="Lower end of the effect's 95% interval.")  # type: ignore[prop-decorator]
    @property
    def low(self) -> float | None:
        interval = self.interval()
        return None if interval is None else round(interval[0], 6)

    @computed_field(description="Upper end of the effect's 95% interval.")  # type: ignore[prop-decorator]
    @property
    def high(self) -> float | None:
        interval = self.interval()
        return None if interval is None else round(interval[1], 6)

    def interval(self, level: float = DEFAULT_LEVEL) -> tuple[float, float] | None:
        """The effect's two-sided `level` confidence interval (None with fewer than two queries)."""
        if self.weight <= 0 or self.groups < 2:
            return None
        from scipy.special import stdtrit  # Student-t quantile; scipy.special alone (scipy.stats: ~0.8 s to import)

        effect = self.weighted_effect / self.weight
        spread = max(self.weighted_square - self.weight * effect * effect, 0.0) / (self.groups - 1)
        # a few queries can agree by chance (four differences of -0.5, -0.25, -0.5, -0.33): their spread is then
        # no measure of the rollouts' own noise, which the rewards' variance bounds from below
        rollouts = max(self.with_rollouts + self.without_rollouts, 1)  # 0 only in a hand-edited file
        mean = self.reward_sum / rollouts
        noise = max(self.reward_square_sum / rollouts - mean * mean, 0.0) * rollouts / max(rollouts - 1, 1)
        standard_error = math.sqrt(max(spread, noise) / self.weight)
        half = float(stdtrit(self.groups - 1, 0.5 + level / 2)) * standard_error
        return effect - half, effect + half

    def verdict(self, *, min_groups: int = DEFAULT_MIN_GROUPS, level: float = DEFAULT_LEVEL) -> Verdict:
        """hurts / helps: the interval is wholly below / above 0 over at least `min_groups` queries."""
        if self.groups < max(min_groups, 2):
            return "untested"
        low, high = self.interval(level) or (0.0, 0.0)
        if high < 0:
            return "hurts"
        if low > 0:
            return "helps"
        return "unclear"

    def summary(self, *, min_groups: int = DEFAULT_MIN_GROUPS, level: float = DEFAULT_LEVEL) -> dict[str, object]:
        """effect, its interval, n and the verdict, rounded for a table or an export."""
        interval = self.interval(level)
        return {
            "effect": None if self.effect is None else round(self.effect, 4),
            "low": None if interval is None else round(interval[0], 4),
            "high": None if interval is None else round(interval[1], 4),
            "groups": self.groups,
            "with": self.with_rollouts,
            "without": self.without_rollouts,
            "verdict": self.verdict(min_groups=min_groups, level=level),
        }

    def describe(self, *, level: float = DEFAULT_LEVEL) -> str:
        """'+0.42 [+0.31, +0.53] n=12' (queries), or '-' before any evidence."""
        if self.effect is None:
            return "-"
        interval = self.interval(level)
        shown = f"{self.effect:+.2f}"
        if interval is not None:
            shown += f" [{interval[0]:+.2f}, {interval[1]:+.2f}]"
        return f"{shown} n={self.groups}"


__all__ = ["DEFAULT_LEVEL", "DEFAULT_MIN_GROUPS", "Credit", "Verdict"]
