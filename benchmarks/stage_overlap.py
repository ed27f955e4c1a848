"""A learn run against a provider whose latencies vary: per-query stages against the stage-by-stage bound.

    OMP_NUM_THREADS=1 python benchmarks/stage_overlap.py [--latency-ms 200] [--spread 0.5] [--repeat 3]

The steps workload of `engine.py --workload steps` (`tfgrpo learn` as a fresh process: 30 problems x G = 5,
2 epochs, batches of 10, 6 steps, 666 requests), against the scripted server with each request's latency
drawn log-normally around `--latency-ms` (sigma `--spread`, seeded by the request, so every run sees the
same latencies). From the server's log it prints, next to the measured wall time after the first request:

- the stage-by-stage bound: per step, the slowest rollout + the slowest summary + the slowest group analysis
  + the consolidation: the least any engine can take that starts a stage once the whole batch has finished
  the one before (tfgrpo's engine until 2026-12-05);
- the per-query bound: per step, the slowest query's own rollouts + summaries + analysis, then the
  consolidation: what an engine reaches whose queries go on as soon as their own previous stage is done
  (tfgrpo.learn.query_stages).

A run below the stage-by-stage bound is one a stage-by-stage engine could not have made on these latencies.
"""

from __future__ import annotations

import argparse
import os
import statistics

from engine_steps import compile_project, run_steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, default=200.0, help="median latency of a request")
    parser.add_argument("--spread", type=float, default=0.5, help="sigma of the log-normal latency")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPU cores, load average {', '.join(f'{x:.2f}' for x in os.getloadavg())} at start")
    compile_project()
    print(
        "| run | requests | stage-by-stage bound | per-query bound | measured: first request to last reply | "
        "measured / stage-by-stage bound |"
    )
    print("|---|---|---|---|---|---|")
    rows = []
    for index in range(args.repeat):
        r = run_steps(args.latency_ms / 1000, spread=args.spread)
        measured = r["span_s"]
        rows.append((r["stagewise_bound_s"], r["per_query_bound_s"], measured))
        print(
            f"| {index + 1} | {r['requests']} | {r['stagewise_bound_s']:.2f} s | {r['per_query_bound_s']:.2f} s | "
            f"{measured:.2f} s | {measured / r['stagewise_bound_s']:.2f} |",
            flush=True,
        )
    stagewise, per_query, measured = (statistics.median(column) for column in zip(*rows, strict=True))
    print(f"| **median** | | {stagewise:.2f} s | {per_query:.2f} s | {measured:.2f} s | {measured / stagewise:.2f} |")
    print(f"load average {', '.join(f'{x:.2f}' for x in os.getloadavg())} at the end")


if __name__ == "__main__":
    main()
