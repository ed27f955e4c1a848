"""Validity and power of the champion-vs-challenger sequential test (tfgrpo.core.sequential), by simulation.

    OMP_NUM_THREADS=1 python benchmarks/sequential_power.py [--streams 400] [--horizon 200] [--power-streams 100]

Two tables, on streams whose truth is known, the test looked at after every observation:

1. A/A (no difference): the share of streams the test ever promotes, with its 95 % Clopper-Pearson
   interval, at several alphas, paired, two-sample and switching from one to the other (`--kinds`), base
   rates 0.3 and 0.5, `--horizon` per arm.
2. A challenger 10 points better (Bernoulli rewards), `max_samples` 2000 per arm: samples per arm (pairs
   when paired) until the promotion, median and 90th percentile, the power reached within 2000, and the
   sample size per arm a fixed-horizon test needs at the same alpha and that power (capped at 0.999), and
   at 90 % power, which the sequential test reaches at its 90th percentile (two-sided: scipy's normal
   quantiles for the two-proportion z-test; the paired t-test's noncentral t for pairs).

Paired streams give each prompt its own difficulty q ~ Beta(4 b, 4 (1 - b)) for base rate b, the champion
succeeding with probability q and the challenger with q + 0.1 (1 - q) / (1 - b) (10 points on average):
the same prompt is easier or harder for both, which is what pairing buys.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402

from tfgrpo.core.sequential import Observation, SequentialSettings, decide, difference_path  # noqa: E402

EFFECT = 0.10
CONCENTRATION = 4.0


def stream(rng: np.random.Generator, n: int, base: float, effect: float, *, paired: bool, unpaired_first: int = 0):
    """n observations per arm, alternating in time; paired streams send prompt t to both arms (from
    `unpaired_first` on: before it, each arm gets prompts of its own)."""
    if paired:
        q = rng.beta(CONCENTRATION * base, CONCENTRATION * (1 - base), size=n)
        champion_p, challenger_p = q, q + effect * (1 - q) / (1 - base)
    else:
        champion_p, challenger_p = np.full(n, base), np.full(n, base + effect)
    wins_a, wins_b = rng.random(n) < champion_p, rng.random(n) < challenger_p
    shared = [paired and t >= unpaired_first for t in range(n)]
    champion = [Observation(f"q{t}" if shared[t] else f"a{t}", float(wins_a[t]), 2.0 * t) for t in range(n)]
    challenger = [Observation(f"q{t}" if shared[t] else f"b{t}", float(wins_b[t]), 2.0 * t + 1) for t in range(n)]
    return champion, challenger


def first_decision(path, settings: SequentialSettings):
    for bounds in path:
        decision = decide(bounds, settings)
        if decision.action != "continue":
            return decision.action, bounds.n_test
    return "continue", path[-1].n_test


def first_promotion(champion, challenger, settings: SequentialSettings):
    """The first decision on growing prefixes (250, 500, 1000, ... per arm): at most twice the work of one pass
    up to the decision, instead of a pass over all `max_samples`."""
    n = 250
    while True:
        n = min(n, len(champion))
        action, n_test = first_decision(difference_path(champion[:n], challenger[:n], alpha=settings.alpha), settings)
        if action != "continue" or n == len(champion):
            return action, n_test
        n *= 2


def a_a_table(streams: int, horizon: int, alphas: list[float], kinds: list[str]) -> list[str]:
    # "switching": the first quarter of the prompts reach one arm each, the rest both: the bounds start
    # two-sample and turn paired once the pairs cover half of the smaller arm (at half the horizon)
    designs = {"paired": (True, 0, 10), "two-sample": (False, 0, 0), "switching": (True, horizon // 4, 20)}
    rows = [
        f"| alpha | kind | base rate | false promotions / {streams} | rate | 95 % CI | ms a stream |",
        "|---|---|---|---|---|---|---|",
    ]
    for alpha in alphas:
        settings = SequentialSettings(alpha=alpha, max_samples=horizon)
        for kind in kinds:
            paired, unpaired_first, seed = designs[kind]
            for base in (0.3, 0.5):
                rng = np.random.default_rng(int(alpha * 1000) + seed + int(base * 10))
                started, promoted = time.perf_counter(), 0
                for _ in range(streams):
                    champion, challenger = stream(
                        rng, horizon, base, 0.0, paired=paired, unpaired_first=unpaired_first
                    )
                    path = difference_path(champion, challenger, alpha=alpha)
                    promoted += first_decision(path, settings)[0] == "promote"
                elapsed = (time.perf_counter() - started) / streams
                ci = stats.binomtest(promoted, streams).proportion_ci(0.95, method="exact")
                rows.append(
                    f"| {alpha:.2f} | {kind} | {base:.1f} | {promoted} | {promoted / streams:.3f} "
                    f"| [{ci.low:.3f}, {ci.high:.3f}] | {1000 * elapsed:.1f} |"
                )
    return rows


def fixed_two_proportion_n(base: float, alpha: float, power: float) -> int:
    """Per-arm n of the two-sided two-proportion z-test (pooled variance under the null)."""
    p1, p2 = base, base + EFFECT
    pooled = (p1 + p2) / 2
    z_alpha, z_power = stats.norm.ppf(1 - alpha / 2), stats.norm.ppf(power)
    root = z_alpha * np.sqrt(2 * pooled * (1 - pooled)) + z_power * np.sqrt(p1 * (1 - p1) + p2 * (1 - p2))
    return int(np.ceil((root / EFFECT) ** 2))


def fixed_paired_t_n(sd: float, alpha: float, power: float) -> int:
    """Pairs the two-sided paired t-test needs for `power` at a mean difference of EFFECT (noncentral t)."""
    n = 2
    while True:
        df = n - 1
        critical = stats.t.ppf(1 - alpha / 2, df)
        reached = stats.nct.sf(critical, df, EFFECT * np.sqrt(n) / sd)
        if reached >= power:
            return n
        n += 1 if n < 100 else max(1, n // 100)


def paired_difference_sd(base: float, rng: np.random.Generator) -> float:
    champion, challenger = stream(rng, 200_000, base, EFFECT, paired=True)
    return float(np.std([b.reward - a.reward for a, b in zip(champion, challenger, strict=True)]))


def power_table(streams: int, alpha: float) -> list[str]:
    settings = SequentialSettings(alpha=alpha)
    rows = [
        f"| kind | base rate | power within {settings.max_samples} | median n | 90th pct n "
        "| fixed-horizon n at that power | fixed-horizon n at 90 % power | 90th pct / fixed at 90 % | ms a stream |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for paired in (True, False):
        for base in (0.3, 0.5):
            rng = np.random.default_rng(7 + 10 * paired + int(base * 10))
            started, samples = time.perf_counter(), []
            for _ in range(streams):
                action, n = first_promotion(*stream(rng, settings.max_samples, base, EFFECT, paired=paired), settings)
                if action == "promote":
                    samples.append(n)
            elapsed = (time.perf_counter() - started) / streams
            power = len(samples) / streams
            target = min(power, 0.999)
            if paired:
                sd = paired_difference_sd(base, rng)
                fixed, fixed90 = fixed_paired_t_n(sd, alpha, target), fixed_paired_t_n(sd, alpha, 0.9)
            else:
                fixed, fixed90 = fixed_two_proportion_n(base, alpha, target), fixed_two_proportion_n(base, alpha, 0.9)
            median, p90 = np.median(samples), np.quantile(samples, 0.9)
            kind = "paired" if paired else "two-sample"
            rows.append(
                f"| {kind} | {base:.1f} | {power:.3f} | {median:.0f} | {p90:.0f} | {fixed} "
                f"| {fixed90} | {p90 / fixed90:.2f} | {1000 * elapsed:.0f} |"
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=400, help="A/A streams per cell")
    parser.add_argument("--horizon", type=int, default=200, help="A/A observations per arm")
    parser.add_argument(
        "--power-streams", type=int, default=100, help="+10-point streams per cell (0: no power table)"
    )
    parser.add_argument("--alphas", default="0.01,0.05,0.10")
    parser.add_argument("--kinds", default="paired,two-sample,switching", help="A/A stream designs")
    parser.add_argument("--alpha", type=float, default=0.05, help="alpha of the power table")
    args = parser.parse_args()
    print(f"python {platform.python_version()}, {platform.processor() or platform.machine()}")
    alphas = [float(a) for a in args.alphas.split(",")]
    print(f"\nA/A, {args.horizon} per arm, a decision after every observation from min_samples 20:\n")
    print("\n".join(a_a_table(args.streams, args.horizon, alphas, args.kinds.split(","))))
    if args.power_streams > 0:
        print(f"\n+{EFFECT:.2f} challenger, alpha {args.alpha}, {args.power_streams} streams a row:\n")
        print("\n".join(power_table(args.power_streams, args.alpha)))


if __name__ == "__main__":
    main()
