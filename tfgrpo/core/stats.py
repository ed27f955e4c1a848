"""Is system B really better than system A on the same problems? Paired tests over per-problem accuracy.

Both tests work on d_i = acc_B(i) − acc_A(i), one value per problem both systems answered:
- a percentile bootstrap CI of mean(d), resampling problems with replacement (seeded);
- a two-sided paired permutation (sign-flip) test: under "no difference" each d_i is as likely to be
  −d_i, so p = share of sign assignments whose |mean| is at least the observed |mean|. With at most
  `exact_max` problems that have d_i ≠ 0, all 2^m assignments are enumerated (exact p); otherwise
  `n_permutations` random ones are drawn and p = (1 + hits) / (1 + draws), which is never 0.
Problems with d_i = 0 cannot change sign, so they are left out of the enumeration (same p, less work).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from tfgrpo.core.metrics import N_BOOTSTRAP, bootstrap_ci

N_PERMUTATIONS = 10_000
EXACT_MAX = 16


class PairedComparison(BaseModel):
    """B minus A over paired problems."""

    model_config = ConfigDict(frozen=True)

    num_problems: int
    diff: float
    ci95: list[float]
    p_value: float
    p_method: str
    wins: int
    losses: int
    ties: int


def paired_bootstrap_ci(
    a: Sequence[float], b: Sequence[float], *, seed: int = 0, n_bootstrap: int = N_BOOTSTRAP
) -> list[float]:
    """95 % percentile bootstrap CI of mean(b − a)."""
    return bootstrap_ci(_differences(a, b), seed=seed, n_bootstrap=n_bootstrap)


def sign_flip_p_value(
    a: Sequence[float],
    b: Sequence[float],
    *,
    seed: int = 0,
    n_permutations: int = N_PERMUTATIONS,
    exact_max: int = EXACT_MAX,
) -> tuple[float, str]:
    """Two-sided paired permutation p-value of mean(b − a) and how it was computed."""
    diffs = _differences(a, b)
    nonzero = diffs[diffs != 0.0]
    if nonzero.size == 0:
        return 1.0, "exact (all differences are zero)"
    observed = abs(nonzero.sum())
    tolerance = 1e-9 * max(1.0, observed)  # float sums of the same values in another order
    if nonzero.size <= exact_max:
        # each row of `signs` is one assignment: bit j of the row index decides the sign of nonzero[j]
        rows = np.arange(2**nonzero.size, dtype=np.int64)[:, None]
        signs = 1.0 - 2.0 * ((rows >> np.arange(nonzero.size)) & 1)
        sums = np.abs(signs @ nonzero)
        return float(np.mean(sums >= observed - tolerance)), f"exact ({2**nonzero.size} sign assignments)"
    rng = np.random.default_rng(seed)
    hits = 0
    for start in range(0, n_permutations, 2_000):
        size = min(2_000, n_permutations - start)
        signs = rng.choice(np.array([-1.0, 1.0]), size=(size, nonzero.size))
        hits += int(np.sum(np.abs(signs @ nonzero) >= observed - tolerance))
    return (1 + hits) / (1 + n_permutations), f"Monte Carlo ({n_permutations} sign flips, seed {seed})"


def compare_paired(
    a: Sequence[float],
    b: Sequence[float],
    *,
    seed: int = 0,
    n_bootstrap: int = N_BOOTSTRAP,
    n_permutations: int = N_PERMUTATIONS,
    exact_max: int = EXACT_MAX,
) -> PairedComparison:
    """Difference B − A in mean per-problem accuracy, its CI, p-value, and per-problem wins/losses of B."""
    diffs = _differences(a, b)
    p_value, method = sign_flip_p_value(a, b, seed=seed, n_permutations=n_permutations, exact_max=exact_max)
    return PairedComparison(
        num_problems=int(diffs.size),
        diff=float(diffs.mean()),
        ci95=bootstrap_ci(diffs, seed=seed, n_bootstrap=n_bootstrap),
        p_value=p_value,
        p_method=method,
        wins=int(np.sum(diffs > 0)),
        losses=int(np.sum(diffs < 0)),
        ties=int(np.sum(diffs == 0)),
    )


def _differences(a: Sequence[float], b: Sequence[float]) -> np.ndarray:
    first, second = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if first.shape != second.shape or first.ndim != 1:
        raise ValueError(f"paired values need two equal-length lists (got {first.shape} and {second.shape})")
    if first.size == 0:
        raise ValueError("no paired problems")
    return second - first


__all__ = ["EXACT_MAX", "N_PERMUTATIONS", "PairedComparison", "compare_paired", "paired_bootstrap_ci", "sign_flip_p_value"]
