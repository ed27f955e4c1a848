"""Is system B really better than system A on the same problems? Paired tests over per-problem accuracy.

Both tests work on d_i = acc_B(i) − acc_A(i), one value per problem both systems answered:
- a percentile bootstrap CI of mean(d), resampling problems with replacement (seeded);
- a two-sided paired permutation (sign-flip) test: under "no difference" each d_i is as likely to be
  −d_i, so p = share of sign assignments whose |mean| is at least the observed |mean|. With at most
  `exact_max` problems that have d_i ≠ 0, all 2^m assignments are enumerated (exact p); otherwise
  `n_permutations` random ones are drawn and p = (1 + hits) / (1 + draws), which is never 0 (unless
  2^m ≤ `n_permutations`: then enumerating is cheaper and exact, so it is done).
Problems with d_i = 0 cannot change sign, so they are left out of the enumeration (same p, less work).
Both run on `scipy.stats` (`bootstrap`, and `permutation_test` with permutation_type="samples" on one
sample of differences, which is the sign-flip test); tests/core/test_stats_scipy.py pins the exact p-values to
the earlier hand-written enumeration.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from tfgrpo.core.metrics import N_BOOTSTRAP, bootstrap_ci

if TYPE_CHECKING:  # numpy itself is imported in the functions (start-up time, see tfgrpo.core.metrics)
    import numpy as np

N_PERMUTATIONS = 10_000
EXACT_MAX = 16
_PERMUTATION_BATCH = 2_000


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
    import numpy as np

    diffs = _differences(a, b)
    nonzero = diffs[diffs != 0.0]
    if nonzero.size == 0:
        return 1.0, "exact (all differences are zero)"
    if nonzero.size == 1:  # scipy needs two observations; both sign flips of one difference reach |d|
        return 1.0, "exact (2 sign assignments)"
    # scipy also enumerates when the draws asked for would not be fewer than the 2^m assignments
    exact = nonzero.size <= exact_max or 2**nonzero.size <= n_permutations
    # one sample + permutation_type="samples" = every resample flips the sign of each d_i independently;
    # n_resamples=inf makes scipy enumerate all 2^m assignments (the observed one included)
    from scipy import stats as scipy_stats  # 0.8 s to import: only when a statistic is computed

    result = scipy_stats.permutation_test(
        (nonzero,),
        _absolute_sum,
        permutation_type="samples",
        vectorized=True,
        n_resamples=np.inf if exact else n_permutations,
        batch=_PERMUTATION_BATCH,
        alternative="greater",  # |sum| ≥ observed |sum|: the two-sided test on the signed mean
        rng=np.random.default_rng(seed),
    )
    if exact:
        return float(result.pvalue), f"exact ({2**nonzero.size} sign assignments)"
    # scipy's Monte Carlo p is (1 + hits) / (1 + draws), so never 0
    return float(result.pvalue), f"Monte Carlo ({n_permutations} sign flips, seed {seed})"


def _absolute_sum(values: np.ndarray, axis: int = -1) -> np.ndarray:
    import numpy as np

    return np.abs(np.sum(values, axis=axis))


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
    import numpy as np

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
    import numpy as np

    first, second = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if first.shape != second.shape or first.ndim != 1:
        raise ValueError(f"paired values need two equal-length lists (got {first.shape} and {second.shape})")
    if first.size == 0:
        raise ValueError("no paired problems")
    return second - first


__all__ = [
    "EXACT_MAX",
    "N_PERMUTATIONS",
    "PairedComparison",
    "compare_paired",
    "paired_bootstrap_ci",
    "sign_flip_p_value",
]
