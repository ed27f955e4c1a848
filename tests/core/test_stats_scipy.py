"""The bootstrap CI and the sign-flip test run on scipy.stats; they must give what the hand-written code gave.

The old implementations are copied here verbatim as the reference: exact p-values must be identical, and
the bootstrap CI (different random draws) must agree within a Monte Carlo tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest

from tfgrpo.core.metrics import bootstrap_ci
from tfgrpo.core.stats import sign_flip_p_value


def _old_exact_sign_flip_p(a, b) -> float:
    """The hand-written exact enumeration that scipy.stats.permutation_test replaced."""
    diffs = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    nonzero = diffs[diffs != 0.0]
    if nonzero.size == 0:
        return 1.0
    observed = abs(nonzero.sum())
    tolerance = 1e-9 * max(1.0, observed)
    rows = np.arange(2**nonzero.size, dtype=np.int64)[:, None]
    signs = 1.0 - 2.0 * ((rows >> np.arange(nonzero.size)) & 1)
    sums = np.abs(signs @ nonzero)
    return float(np.mean(sums >= observed - tolerance))


def _old_bootstrap_ci(values, *, seed=0, n_bootstrap=10_000, level=0.95) -> list[float]:
    """The hand-written percentile bootstrap that scipy.stats.bootstrap replaced."""
    data = np.asarray(values, dtype=np.float64)
    if data.size == 1 or np.all(data == data[0]):
        return [float(data[0]), float(data[0])]
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, data.size, size=(n_bootstrap, data.size))].mean(axis=1)
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(means, [alpha, 1.0 - alpha])
    return [float(low), float(high)]


def _fixed_pairs():
    rng = np.random.default_rng(11)
    yield [0, 0, 0], [1, 1, 1]  # p = 2/8
    yield [0, 1, 0, 1, 0], [1, 1, 1, 0, 1]  # mixed wins/losses/ties
    yield [0.2, 0.4, 0.6, 0.8], [0.2, 0.4, 0.6, 0.8]  # all ties → 1.0
    yield [1, 0], [0, 1]  # observed sum 0 → 1.0
    yield [0.1, 0.3, 0.5], [0.4, 0.2, 0.9]  # fractional accuracies (float sums in another order)
    yield rng.uniform(size=10).tolist(), (rng.uniform(size=10) + 0.2).tolist()
    yield rng.integers(0, 2, 16).tolist(), rng.integers(0, 2, 16).tolist()
    a = rng.uniform(size=16)
    yield a.tolist(), (a + rng.normal(0.05, 0.1, 16)).tolist()  # 16 non-zero: 65 536 assignments


@pytest.mark.parametrize("pair", list(_fixed_pairs()), ids=lambda pair: f"n{len(pair[0])}")
def test_exact_p_values_equal_the_old_enumeration(pair):
    a, b = pair
    p_value, method = sign_flip_p_value(a, b)
    assert method.startswith("exact")
    assert p_value == pytest.approx(_old_exact_sign_flip_p(a, b), rel=1e-12, abs=0)


def test_monte_carlo_p_is_never_zero_and_labelled():
    a = [0.0] * 40
    p_value, method = sign_flip_p_value(a, [1.0] * 40, n_permutations=999)
    assert p_value == pytest.approx(1 / 1000) and method == "Monte Carlo (999 sign flips, seed 0)"


@pytest.mark.parametrize("seed", [0, 3])
def test_bootstrap_ci_agrees_with_the_old_implementation(seed):
    rng = np.random.default_rng(seed)
    for values in (rng.uniform(size=25), rng.integers(0, 2, 60).astype(float), rng.beta(2, 5, 200)):
        new, old = bootstrap_ci(values, seed=seed), _old_bootstrap_ci(values, seed=seed)
        # different random draws of 10 000 resamples: endpoints agree within ~1/10 of the CI width
        width = old[1] - old[0]
        assert new == pytest.approx(old, abs=0.1 * width)
        assert new[0] <= float(np.mean(values)) <= new[1]
    assert bootstrap_ci([1.0, 1.0]) == [1.0, 1.0]  # degenerate data: the value itself, no scipy warning
