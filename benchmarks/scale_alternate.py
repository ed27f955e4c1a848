"""Is a learn step slower with 10,000 problems held than with 1,000? The sizes alternated, so the host's drift
cancels (issue 31's "time per problem flat" target, checked a second way).

    OMP_NUM_THREADS=1 python benchmarks/scale_alternate.py [--sizes 1000,10000] [--pairs 2] [--steps 10]

`benchmarks/scale.py` measures each size once, minutes apart: on a 2-core cloud host a single run's time per
problem moves by up to ±10 % between runs of the same code, as much as the 1.10x bound, so its verdict can
flip with the host. Here every size runs `--steps` steps of `learn` (the same command, data, server and
settings as scale.py's learn rows; a larger run is stopped after its `--steps`-th step), sizes alternating,
`--pairs` times. A step's time is the interval between two consecutive step lines of the run's output (read
as they come), so start-up is left out; the first step, whose library is empty, is left out too. Printed:
each run's median step, each size's median over its runs, the ratio of the largest size to the smallest,
and a verdict against 1.10x. Steps after the first `--steps` of a long run are what scale.py's "first tenth
→ last tenth" note covers.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from engine import write_problems  # noqa: E402
from scale import ROOT, child_env, compile_project, cpu_model, learn_argv, load, server  # noqa: E402

STEP_LINE = re.compile(r"^step \d+ ")


def step_times(n: int, data: Path, out: Path, steps: int, latency_s: float) -> list[float]:
    """Seconds between consecutive step lines of one `learn` run, stopped after its `steps`-th step."""
    with server(latency_s) as srv:
        argv = learn_argv(srv, data, out, "enforce")
        process = subprocess.Popen(
            argv, env=child_env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert process.stdout is not None
        seen: list[float] = []
        for line in process.stdout:
            if STEP_LINE.match(line):
                seen.append(time.perf_counter())
                if len(seen) >= steps:
                    break
        process.kill()
        process.wait()
    if len(seen) < steps:
        raise SystemExit(f"learn {n:,} printed {len(seen)} step lines, expected {steps}")
    return [b - a for a, b in itertools.pairwise(seen)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000", help="learn sizes, comma-separated")
    parser.add_argument("--pairs", type=int, default=2, help="runs of each size, alternating")
    parser.add_argument("--steps", type=int, default=10, help="steps of each run (the smallest size must have them)")
    parser.add_argument("--latency-ms", type=float, default=200.0)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"{cpu_model()}, {os.cpu_count()} cores, load average {load()} at start")
    compile_project()
    medians: dict[int, list[float]] = {n: [] for n in sizes}
    with tempfile.TemporaryDirectory(prefix="tfgrpo-scale-alt-") as folder:
        tmp = Path(folder)
        data = {n: write_problems(tmp / f"train-{n}.jsonl", n) for n in sizes}
        for pair in range(args.pairs):
            for n in sizes:
                times = step_times(n, data[n], tmp / f"run-{n}-{pair}", args.steps, args.latency_ms / 1000)
                medians[n].append(statistics.median(times))
                print(f"learn {n:,}, run {pair + 1}: steps 2-{len(times) + 1} " + " ".join(f"{t:.2f}" for t in times))
    print(f"\nload average {load()} at the end\n")
    print("| problems | median step, each run | median of the runs |")
    print("|---|---|---|")
    for n in sizes:
        print(f"| {n:,} | {', '.join(f'{m:.2f} s' for m in medians[n])} | {statistics.median(medians[n]):.2f} s |")
    small, big = statistics.median(medians[sizes[0]]), statistics.median(medians[sizes[-1]])
    ratio = big / small
    print(
        f"\n{'PASS' if ratio <= 1.1 else 'FAIL'}: a step with {sizes[-1]:,} problems held takes {ratio:.2f}x one "
        f"with {sizes[0]:,} (alternating, {args.pairs} runs each; target ≤ 1.10x)"
    )


if __name__ == "__main__":
    main()
