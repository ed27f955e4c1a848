"""Benchmark of the math reward: verifications per second and worst-case latency on hostile answers.

    OMP_NUM_THREADS=1 python benchmarks/rewards.py [--n 4000] [--workers 2] [--direct-hostile]

Compares, in the same run, `tfgrpo.rewards.MathReward` (extraction + exact fast path + killable worker pool)
with math-verify called directly (`verify(parse(gold), parse(completion))`, one process, its own
signal-based timeouts). Pairs are distinct and the verdict cache is off, so no number comes from caching.
Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import random
import sys
import time
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path and its name would shadow the package.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from tfgrpo.rewards import MathReward  # noqa: E402
from tfgrpo.rewards.verifier import Verifier  # noqa: E402


def integer_pairs(n: int, rng: random.Random) -> list[tuple[str, str]]:
    pairs = []
    for i in range(n):
        gold = rng.randint(0, 10**6)
        pred = gold if i % 2 == 0 else gold + rng.randint(1, 9)
        pairs.append((str(gold), f"Adding everything up gives \\boxed{{{pred:03d}}}."))
    return pairs


def fraction_pairs(n: int, rng: random.Random) -> list[tuple[str, str]]:
    pairs = []
    for i in range(n):
        a, b = rng.randint(1, 999), rng.randint(2, 999)
        if i % 3 == 0:  # same value, other spelling: decided in-process
            pred = f"\\frac{{{a * 2}}}{{{b * 2}}}"
        elif i % 3 == 1:  # rounded decimal: needs math-verify's rounding rule
            pred = f"{a / b:.6f}"
        else:  # a different fraction
            pred = f"{a + 1}/{b}"
        pairs.append((f"\\frac{{{a}}}{{{b}}}", f"so the answer is \\boxed{{{pred}}}"))
    return pairs


def symbolic_pairs(n: int, rng: random.Random) -> list[tuple[str, str]]:
    pairs = []
    for i in range(n):
        k, m = rng.randint(1, 50), rng.randint(2, 30)
        if i % 2 == 0:
            gold, pred = f"(x+{k})^2", f"x^2+{2 * k}x+{k * k}"
        else:
            gold, pred = f"{k}\\sqrt{{{m}}}", f"\\sqrt{{{k * k * m + (i % 4 == 1)}}}"
        pairs.append((gold, f"Therefore \\boxed{{{pred}}}"))
    return pairs


def time_ours(pairs: list[tuple[str, str]], reward: MathReward) -> tuple[float, float]:
    start = time.perf_counter()
    values = reward(completions=[c for _, c in pairs], answer=[g for g, _ in pairs])
    elapsed = time.perf_counter() - start
    return len(pairs) / elapsed, sum(v or 0.0 for v in values) / len(values)


def time_direct(pairs: list[tuple[str, str]], limit: int) -> tuple[float, float]:
    from math_verify import parse, verify

    sample = pairs[:limit]
    start = time.perf_counter()
    correct = 0
    for gold, completion in sample:
        correct += verify(parse(f"${gold}$"), parse(completion))
    elapsed = time.perf_counter() - start
    return len(sample) / elapsed, correct / len(sample)


def plain_number_median_ms(reward: MathReward, n: int = 2000) -> float:
    """Median wall time of one `score` call on one integer completion (the in-process path), in ms."""
    times = []
    for i in range(n):
        completion = f"Adding everything up gives \\boxed{{{i + (i % 2)}}}."
        start = time.perf_counter()
        reward.score([completion], answer=[str(i)])
        times.append(time.perf_counter() - start)
    return 1000 * sorted(times)[len(times) // 2]


def hostile_latencies(reward: MathReward) -> list[tuple[str, str, float, float | None]]:
    spec = importlib.util.spec_from_file_location("cases", Path(__file__).parents[1] / "tests/data/reward_cases.py")
    cases = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cases)
    rows = []
    for family, answer in cases.HOSTILE_ANSWERS:
        start = time.perf_counter()
        (score,) = reward.score([f"so \\boxed{{{answer}}}"], answer=["1"])
        rows.append(
            (family, answer[:28] + ("..." if len(answer) > 28 else ""), time.perf_counter() - start, score.value)
        )
    for shape, completion in cases.LONG_COMPLETIONS:
        start = time.perf_counter()
        (score,) = reward.score([completion], answer=["7"])
        rows.append(("200KB completion", shape, time.perf_counter() - start, score.value))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4000, help="integer pairs (fractions: n/4, symbolic: n/10)")
    parser.add_argument("--workers", type=int, default=None, help="verifier processes (default: cores)")
    parser.add_argument("--timeout", type=float, default=1.0, help="budget per comparison, worker CPU seconds")
    parser.add_argument(
        "--wall-factor",
        type=float,
        default=3.0,
        help="wall-clock backstop, multiple of --timeout (1 = a pure wall-clock deadline)",
    )
    parser.add_argument("--direct-limit", type=int, default=400, help="pairs timed for math-verify direct")
    args = parser.parse_args()
    logging.getLogger("math_verify").setLevel(logging.ERROR)

    rng = random.Random(0)
    verifier = Verifier(args.workers, timeout_s=args.timeout, wall_factor=args.wall_factor, cache_size=0)
    reward = MathReward(verifier=verifier)
    verifier.check_many([("x+1", "1+x")] * 1 + [("2x", "x+x")])  # start the workers before timing

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"workers: {verifier.workers}, budget: {args.timeout:g} CPU s (wall backstop {args.timeout * verifier.wall_factor:g} s), "
        f"cores: {os.cpu_count()}, load average at start: {load:.1f}\n"
    )
    print(
        "| answers | pairs | MathReward verifications/s | math-verify direct /s | speed-up | mean reward (ours / direct) |"
    )
    print("|---|---:|---:|---:|---:|---|")
    for label, pairs in (
        ("integer", integer_pairs(args.n, rng)),
        ("fraction / decimal", fraction_pairs(max(args.n // 4, 30), rng)),
        ("symbolic", symbolic_pairs(max(args.n // 10, 20), rng)),
    ):
        ours, our_mean = time_ours(pairs, reward)
        direct, direct_mean = time_direct(pairs, args.direct_limit)
        print(
            f"| {label} | {len(pairs)} | {ours:,.0f} | {direct:,.0f} | {ours / direct:.1f}x | {our_mean:.3f} / {direct_mean:.3f} |"
        )

    print(f"\none integer completion per call (in process): median {plain_number_median_ms(reward):.3f} ms")
    print("\n| hostile input | shape | latency s | reward |")
    print("|---|---|---:|---:|")
    rows = hostile_latencies(reward)
    for family, shape, seconds, value in rows:
        print(f"| {family} | `{shape}` | {seconds:.2f} | {value} |")
    print(f"\nworst-case latency: {max(r[2] for r in rows):.2f} s over {len(rows)} hostile inputs")
    verifier.close()


if __name__ == "__main__":
    main()
