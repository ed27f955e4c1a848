"""Champion against challenger on live rewards: an anytime-valid sequential test, safe to look at after every request.

The bounds are a confidence sequence for the difference of mean rewards, challenger minus champion: with
probability at least 1 - alpha they contain the true difference at every sample size at once, so deciding
as soon as a bound clears a threshold, after every observation, keeps the false-promotion rate below alpha.
The sequence comes from `savvi.linear_regression.LinearRegression` (the anytime-valid t-test of Lindon, Ham,
Tingley and Bojinov, "Anytime-valid linear models and regression adjusted causal inference in randomized
experiments"); docs/serving.md ("The sequential test") measures it against `confseq` and `expectation` and says
why. What is ours is the adaptation:

- **Rescaling**: rewards in [low, high] are mapped to [0, 1] before the fit and the bounds mapped back, so
  thresholds are in reward units; a reward outside [low, high] is refused.
- **Pairing**: where one prompt (the same `prompt_key`) reached both arms, the k-th champion observation of
  that prompt is paired with its k-th challenger observation, both in time order (one-to-one; the surplus
  stays unpaired). A pair is complete when its later half arrives.
- **Choosing the kind** (from the prompt keys alone, never from the rewards, so the choice cannot chase a
  lucky bound): "paired" when the complete pairs cover at least half of the smaller arm
  (`PAIRED_SHARE`), then the sequence is the one-sample t-sequence of the per-pair differences (the prompt's
  own difficulty cancels); otherwise "two-sample": every observation of both arms in a regression on an
  intercept and the arm indicator, whose coefficient is the difference of means.
- **Warm-up**: no bound before `WARMUP` observations per arm (or pairs): the bounds are the whole range.
  The t-sequence reads no spread as no noise: when every reward so far is equal within each arm (a
  challenger that fails every request, a champion that never does) the interval shrinks to the observed
  difference, which decides in the data's direction. Under A/A that needs two constant arms that differ,
  probability 2 p^n (1-p)^n at n per arm: below 1e-5 after the warm-up for any base rate p.

The guard test is the same two-sample sequence on failure indicators (an upstream error or timeout = 1).
Each kind alone is valid at alpha; a stream whose kind changes along the way is covered by the union of two
valid sequences: at most 2 alpha in the worst case (benchmarks/sequential_power.py measures it below alpha).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, model_validator

if TYPE_CHECKING:  # numpy and savvi are imported where a bound is computed (start-up time)
    import numpy as np
    from savvi.linear_regression import LinearRegression

PAIRED_SHARE = 0.5
WARMUP = 10


class SequentialInputError(ValueError):
    """Observations the test cannot use (a reward outside its declared range, an empty range)."""


class SequentialSettings(BaseModel):
    """When the sequential test promotes the challenger, rolls it back, or stops and keeps the champion."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    alpha: float = Field(
        0.05,
        gt=0.0,
        lt=1.0,
        description="bound on the false-promotion rate, however often the test is looked at (0 < alpha < 1)",
    )
    min_effect: float = Field(
        0.0,
        ge=0.0,
        description="promote when the lower bound of (challenger - champion) mean reward exceeds this",
    )
    margin: float = Field(
        0.0,
        ge=0.0,
        description="roll the challenger back when the upper bound of (challenger - champion) is below -margin",
    )
    max_samples: int = Field(
        2000, ge=1, description="observations per arm after which the test stops and keeps the champion"
    )
    min_samples: int = Field(20, ge=1, description="observations per arm before any decision")

    @model_validator(mode="after")
    def _samples_in_order(self) -> SequentialSettings:
        if self.min_samples > self.max_samples:
            raise ValueError(
                f"min_samples ({self.min_samples}) must not exceed max_samples ({self.max_samples}): "
                "lower min_samples or raise max_samples"
            )
        return self


class Observation(NamedTuple):
    """One rewarded exchange of one arm."""

    prompt_key: str
    reward: float
    created_at: float


@dataclass(frozen=True)
class DifferenceBounds:
    """Anytime-valid bounds of (challenger - champion) mean reward, in reward units."""

    lower: float
    upper: float
    estimate: float
    n_champion: int
    n_challenger: int
    n_pairs: int
    kind: str  # "paired" | "two-sample"

    @property
    def n_test(self) -> int:
        """The sample size the decision counts: pairs when paired, the smaller arm when two-sample."""
        return self.n_pairs if self.kind == "paired" else min(self.n_champion, self.n_challenger)


@dataclass(frozen=True)
class Decision:
    """What the test does now, and the one rule that made it (a line for the decision log)."""

    action: str  # "promote" | "rollback" | "stop" | "continue"
    rule: str  # one line: "lower bound +0.031 > min_effect 0.000"


def difference_bounds(
    champion: Sequence[Observation],
    challenger: Sequence[Observation],
    *,
    alpha: float,
    low: float = 0.0,
    high: float = 1.0,
) -> DifferenceBounds:
    """The bounds after every observation so far; paired or two-sample by the rule in the module docstring."""
    arms = _Arms.prepare(champion, challenger, alpha=alpha, low=low, high=high)
    n_champion, n_challenger, n_pairs = len(champion), len(challenger), len(arms.pairs)
    if _is_paired(n_pairs, n_champion, n_challenger):
        model = _paired_model(alpha)
        for i, j in arms.pairs:
            model.update(_row(arms.challenger[j] - arms.champion[i], 1.0))
        return arms.bounds(_interval(model, 0, n_pairs >= WARMUP), n_champion, n_challenger, n_pairs, "paired")
    model = _two_sample_model(alpha)
    for reward in arms.champion:
        model.update(_row(reward, 1.0, 0.0))
    for reward in arms.challenger:
        model.update(_row(reward, 1.0, 1.0))
    enough = min(n_champion, n_challenger) >= WARMUP
    return arms.bounds(_interval(model, 1, enough), n_champion, n_challenger, n_pairs, "two-sample")


def difference_path(
    champion: Sequence[Observation],
    challenger: Sequence[Observation],
    *,
    alpha: float,
    low: float = 0.0,
    high: float = 1.0,
) -> list[DifferenceBounds]:
    """The bounds after each observation in time order, as `difference_bounds` would have given them then.

    One pass for a whole stream: the simulations decide after every observation with it, and a status page
    can plot the confidence sequence over time.
    """
    arms = _Arms.prepare(champion, challenger, alpha=alpha, low=low, high=high)
    events = sorted(
        [(o.created_at, 0, i) for i, o in enumerate(champion)]
        + [(o.created_at, 1, j) for j, o in enumerate(challenger)]
    )
    position = {(arm, index): k for k, (_, arm, index) in enumerate(events)}
    completions = sorted((max(position[(0, i)], position[(1, j)]), i, j) for i, j in arms.pairs)
    two_sample, paired = _LazyFit(_two_sample_model(alpha), 1), _LazyFit(_paired_model(alpha), 0)
    counts, n_pairs, path = [0, 0], 0, []
    for k, (_, arm, index) in enumerate(events):
        counts[arm] += 1
        two_sample.add(arms.challenger[index] if arm else arms.champion[index], 1.0, float(arm))
        while n_pairs < len(completions) and completions[n_pairs][0] <= k:
            _, i, j = completions[n_pairs]
            paired.add(arms.challenger[j] - arms.champion[i], 1.0)
            n_pairs += 1
        if _is_paired(n_pairs, counts[0], counts[1]):
            interval, kind = paired.interval(n_pairs >= WARMUP), "paired"
        else:
            interval, kind = two_sample.interval(min(counts) >= WARMUP), "two-sample"
        path.append(arms.bounds(interval, counts[0], counts[1], n_pairs, kind))
    return path


class _LazyFit:
    """A savvi sequence whose rows wait until a bound of it is asked for, and whose last bound is kept.

    A stream that stays paired never asks for the two-sample bound, so its rows are never fitted; the fit
    does not depend on the order its rows arrive in (recursive least squares), so waiting changes nothing.
    """

    def __init__(self, model: LinearRegression, coefficient: int) -> None:
        self.model, self.coefficient = model, coefficient
        self.pending: list[tuple[float, ...]] = []
        self.last: tuple[float, float, float] | None = None
        self.last_enough = False

    def add(self, *values: float) -> None:
        self.pending.append(values)

    def interval(self, enough: bool) -> tuple[float, float, float]:
        if self.pending or self.last is None or enough != self.last_enough:
            for values in self.pending:
                self.model.update(_row(*values))
            self.pending.clear()
            self.last, self.last_enough = _interval(self.model, self.coefficient, enough), enough
        return self.last


def pair_by_prompt(
    champion: Sequence[Observation], challenger: Sequence[Observation]
) -> list[tuple[Observation, Observation]]:
    """One-to-one pairs of the same prompt, in time order within each prompt (see the module docstring)."""
    return [(champion[i], challenger[j]) for i, j in _pair_indices(champion, challenger)]


@dataclass(frozen=True)
class _Arms:
    """Both arms' rewards on the [0, 1] scale and their pairs (as indices), checked once."""

    champion: list[float]
    challenger: list[float]
    pairs: list[tuple[int, int]]
    width: float

    @classmethod
    def prepare(
        cls,
        champion: Sequence[Observation],
        challenger: Sequence[Observation],
        *,
        alpha: float,
        low: float,
        high: float,
    ) -> _Arms:
        _check_alpha(alpha)
        width = _width(low, high)
        return cls(
            champion=_rescaled(champion, low, width, "champion"),
            challenger=_rescaled(challenger, low, width, "challenger"),
            pairs=_pair_indices(champion, challenger),
            width=width,
        )

    def bounds(
        self, interval: tuple[float, float, float], n_champion: int, n_challenger: int, n_pairs: int, kind: str
    ) -> DifferenceBounds:
        lower, upper, estimate = interval
        return DifferenceBounds(
            lower=lower * self.width,
            upper=upper * self.width,
            estimate=estimate * self.width,
            n_champion=n_champion,
            n_challenger=n_challenger,
            n_pairs=n_pairs,
            kind=kind,
        )


def _pair_indices(champion: Sequence[Observation], challenger: Sequence[Observation]) -> list[tuple[int, int]]:
    """(champion index, challenger index): the k-th of a prompt in one arm with its k-th in the other."""
    waiting: dict[str, list[int]] = defaultdict(list)
    for i in sorted(range(len(champion)), key=lambda i: champion[i].created_at):
        waiting[champion[i].prompt_key].append(i)
    taken: dict[str, int] = defaultdict(int)
    pairs = []
    for j in sorted(range(len(challenger)), key=lambda j: challenger[j].created_at):
        key = challenger[j].prompt_key
        if taken[key] < len(waiting.get(key, ())):
            pairs.append((waiting[key][taken[key]], j))
            taken[key] += 1
    pairs.sort(key=lambda pair: max(champion[pair[0]].created_at, challenger[pair[1]].created_at))
    return pairs


def decide(bounds: DifferenceBounds, settings: SequentialSettings) -> Decision:
    """Promote, roll back, stop (keep the champion) or go on, with the one rule that fired."""
    n = bounds.n_test
    unit = "pairs" if bounds.kind == "paired" else "per arm"
    if n < settings.min_samples:
        return Decision("continue", f"n {n} {unit} < min_samples {settings.min_samples}")
    if bounds.lower > settings.min_effect:
        return Decision("promote", f"lower bound {bounds.lower:+.4f} > min_effect {settings.min_effect:.4f}")
    if bounds.upper < -settings.margin:
        return Decision("rollback", f"upper bound {bounds.upper:+.4f} < -margin {-settings.margin:+.4f}")
    if n >= settings.max_samples:
        return Decision("stop", f"n {n} {unit} reached max_samples {settings.max_samples}: the champion stays")
    return Decision(
        "continue",
        f"bounds [{bounds.lower:+.4f}, {bounds.upper:+.4f}] clear neither min_effect "
        f"{settings.min_effect:.4f} nor -margin {-settings.margin:+.4f}",
    )


def guard_bounds(
    champion_failures: Sequence[bool], challenger_failures: Sequence[bool], *, alpha: float
) -> DifferenceBounds:
    """Bounds of (challenger - champion) failure rate (upstream errors, timeouts), two-sample."""
    _check_alpha(alpha)
    model = _two_sample_model(alpha)
    for failed in champion_failures:
        model.update(_row(float(failed), 1.0, 0.0))
    for failed in challenger_failures:
        model.update(_row(float(failed), 1.0, 1.0))
    enough = min(len(champion_failures), len(challenger_failures)) >= WARMUP
    lower, upper, estimate = _interval(model, 1, enough)
    return DifferenceBounds(
        lower=lower,
        upper=upper,
        estimate=estimate,
        n_champion=len(champion_failures),
        n_challenger=len(challenger_failures),
        n_pairs=0,
        kind="two-sample",
    )


def decide_guard(bounds: DifferenceBounds, max_increase: float) -> Decision:
    """Roll back when the challenger's failure rate is, beyond doubt, more than `max_increase` above the champion's."""
    if bounds.lower > max_increase:
        return Decision(
            "rollback", f"failure-rate increase lower bound {bounds.lower:+.4f} > max_increase {max_increase:.4f}"
        )
    return Decision(
        "continue", f"failure-rate increase lower bound {bounds.lower:+.4f} <= max_increase {max_increase:.4f}"
    )


def _is_paired(n_pairs: int, n_champion: int, n_challenger: int) -> bool:
    return n_pairs > 0 and n_pairs >= PAIRED_SHARE * min(n_champion, n_challenger)


def _paired_model(alpha: float) -> LinearRegression:
    from savvi.linear_regression import LinearRegression

    return LinearRegression(alpha=alpha, p=1)


def _two_sample_model(alpha: float) -> LinearRegression:
    from savvi.linear_regression import LinearRegression

    return LinearRegression(alpha=alpha, p=2)


def _row(*values: float) -> np.ndarray:
    import numpy as np

    return np.array(values, dtype=np.float64)


def _interval(model: LinearRegression, coefficient: int, enough: bool) -> tuple[float, float, float]:
    """(lower, upper, estimate) of one coefficient on the rescaled scale, clipped to [-1, 1]."""
    estimate = float(model.beta[coefficient]) if model.n else 0.0
    if not enough or model.nu() <= 0:
        return -1.0, 1.0, max(-1.0, min(1.0, estimate))
    import numpy as np

    with np.errstate(invalid="ignore", divide="ignore"):  # no spread at all: 0/0, answered as the whole range
        lower, upper = (float(v) for v in model.calculate_conf_int()[coefficient])
    if math.isnan(lower) or math.isnan(upper):
        return -1.0, 1.0, max(-1.0, min(1.0, estimate))
    return max(-1.0, lower), min(1.0, upper), max(-1.0, min(1.0, estimate))


def _rescaled(observations: Sequence[Observation], low: float, width: float, arm: str) -> list[float]:
    rewards = []
    for observation in observations:
        value = (observation.reward - low) / width
        if not 0.0 <= value <= 1.0 or math.isnan(value):
            raise SequentialInputError(
                f"{arm} reward {observation.reward!r} (prompt {observation.prompt_key!r}) is outside "
                f"[{low}, {low + width}]: declare the reward's range with low/high"
            )
        rewards.append(value)
    return rewards


def _width(low: float, high: float) -> float:
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        raise SequentialInputError(f"reward range [{low}, {high}] is empty or not finite: need low < high")
    return high - low


def _check_alpha(alpha: float) -> None:
    if not 0.0 < alpha < 1.0:
        raise SequentialInputError(f"alpha {alpha!r} must lie strictly between 0 and 1")
