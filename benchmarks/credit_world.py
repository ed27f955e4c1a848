"""Credit on a noisy world: does the default `tfgrpo learn` (no validation set) end with the harmful rule?

    OMP_NUM_THREADS=1 python benchmarks/credit_world.py                      # the report: seeds 100-109
    OMP_NUM_THREADS=1 python benchmarks/credit_world.py --sweep              # choosing credit_leave_out: seeds 0-9

The world is tests/helpers/noisy_world.py: 100 problems, a model that proposes the true rule, two harmful
near-misses (one number, one operator), platitudes, a decoding accident and rewrites of the true rule into
a harmful one, at random; right 90% of the time under the true rule alone, 5% under a harmful one alone, 30%
otherwise. Each row is one `tfgrpo learn` with the README's defaults (3 epochs, the whole set a step, G = 5)
through the in-process scripted backend. Test accuracy is the policy's exact chance of a right answer with
the final library in its prompt. `--sweep` runs the tuning seeds at several `credit_leave_out` values; the
report runs other seeds, at the default, and with `--val-data --gate`.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))
sys.path.append(str(_HERE))  # last: benchmarks/rewards.py must not shadow the rewards package

from scale import cpu_model, load  # noqa: E402  (benchmarks/scale.py: the machine facts every table carries)

from tests.helpers.noisy_world import (  # noqa: E402
    HARMFUL_RULES,
    NEUTRAL_RULES,
    TRUE_RULE,
    expected_accuracy,
    run_noisy_learn,
)

TUNING_SEEDS = range(0, 10)
REPORT_SEEDS = range(100, 110)


def one_run(seed: int, **settings: Any) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        result, world = run_noisy_learn(Path(folder), seed, train=100, **settings)
        wall = time.perf_counter() - started
    texts = [e.text for e in result.library]
    calls = Counter(world.calls)
    return {
        "seed": seed,
        "accuracy": expected_accuracy(result.library),
        "true": TRUE_RULE in texts,
        "harmful": sum(rule in texts for rule in HARMFUL_RULES),
        "neutral": sum(rule in texts for rule in NEUTRAL_RULES),
        "size": len(texts),
        "retired": len(result.metrics["retired"]),
        "calls": sum(calls.values()),
        "rollout_calls": calls["rollout"],
        "other_tags": sorted(set(calls) - {"rollout", "summary", "group", "consolidate", "validation"}),
        "train_accuracy": result.metrics["totals"]["accuracy"],
        "wall_s": wall,
    }


def table(rows: list[dict[str, Any]], title: str) -> None:
    print(f"\n{title}")
    print("| seed | test acc. | true rule | harmful rules | platitudes | size | retired | calls (rollouts) | wall s |")
    print("|---:|---:|:---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['seed']} | {r['accuracy']:.2f} | {'yes' if r['true'] else 'NO'} | {r['harmful']} | {r['neutral']} "
            f"| {r['size']} | {r['retired']} | {r['calls']} ({r['rollout_calls']}) | {r['wall_s']:.1f} |"
        )
    met = all(r["true"] and not r["harmful"] and r["accuracy"] >= 0.85 for r in rows)
    extra = sorted({tag for r in rows for tag in r["other_tags"]})
    print(
        f"\n{sum(r['true'] for r in rows)}/{len(rows)} keep the true rule, {sum(bool(r['harmful']) for r in rows)}/"
        f"{len(rows)} end with a harmful one, mean test accuracy {sum(r['accuracy'] for r in rows) / len(rows):.3f} "
        f"(true rule alone 0.90, bare model 0.30); calls of another kind than the algorithm's: {extra or 'none'}; "
        f"target (no harmful rule, the true rule, accuracy >= 0.85 in every run): {'MET' if met else 'NOT MET'}"
    )


def sweep(rates: list[float]) -> None:
    print("| credit_leave_out | true rule kept | harmful rule left | mean test acc. | mean training acc. | retired |")
    print("|---:|---:|---:|---:|---:|---:|")
    for rate in rates:
        rows = [one_run(seed, credit_leave_out=rate) for seed in TUNING_SEEDS]
        n = len(rows)
        print(
            f"| {rate} | {sum(r['true'] for r in rows)}/{n} | {sum(bool(r['harmful']) for r in rows)}/{n} | "
            f"{sum(r['accuracy'] for r in rows) / n:.3f} | {sum(r['train_accuracy'] for r in rows) / n:.3f} | "
            f"{sum(r['retired'] for r in rows)} |",
            flush=True,
        )


def precision_and_cost(rates: list[float], repeats: int = 200) -> None:
    """What a share costs and buys where every lesson helps: the true rule alone (0.9 with it, 0.3 without),
    one step of 100 queries x G = 5; the interval's half-width after that step, and the rollouts' reward."""
    import random

    from tfgrpo.experiences.credit import Credit

    print(
        "\n| credit_leave_out | 95% half-width after one step | queries measured | rollouts' reward (0.90 without leave-outs) |"
    )
    print("|---:|---:|---:|---:|")
    for rate in rates:
        if rate <= 0:
            continue
        rng, widths, groups = random.Random(5), [], []
        for _ in range(repeats):
            credit = Credit()
            for _ in range(100):
                arms: dict[bool, list[float]] = {True: [], False: []}
                for _ in range(5):
                    has_it = rng.random() >= rate
                    arms[has_it].append(float(rng.random() < (0.9 if has_it else 0.3)))
                credit.add(arms[True], arms[False])
            low, high = credit.interval() or (float("nan"), float("nan"))
            widths.append((high - low) / 2)
            groups.append(credit.groups)
        print(
            f"| {rate} | {sum(widths) / len(widths):.3f} | {sum(groups) / len(groups):.0f} | {0.9 - 0.6 * rate:.2f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweep", action="store_true", help="Tuning seeds at several credit_leave_out values.")
    parser.add_argument("--rates", default="0,0.1,0.2,0.25,0.3,0.4,0.5")
    parser.add_argument("--json", type=Path, help="Also write the rows here.")
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {cpu_model()}; load {load()}")
    if args.sweep:
        rates = [float(r) for r in args.rates.split(",")]
        sweep(rates)
        precision_and_cost(rates)
        return
    default = [one_run(seed) for seed in REPORT_SEEDS]
    table(default, "Default flags, no validation set (seeds 100-109):")
    gated = [one_run(seed, val_data="auto", gate=True) for seed in REPORT_SEEDS]
    table(gated, "--val-data --gate (40 validation problems, seeds 100-109):")
    off = [one_run(seed, credit_leave_out=0.0) for seed in REPORT_SEEDS]
    table(off, "credit off (--credit-leave-out 0): the paper's algorithm with this project's dedup:")
    print(f"load at the end {load()}")
    if args.json:
        args.json.write_text(json.dumps({"default": default, "gated": gated, "off": off}, indent=1))


if __name__ == "__main__":
    main()
