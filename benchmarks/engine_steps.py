"""The issue-16 run: `tfgrpo learn` as a fresh process against the scripted server (`engine.py --workload steps`).

30 problems x G=5, 2 epochs, batches of 10, concurrency 64 and the vector store on (dedup): 6 steps, so the
bound is 6 x 4 waves; the server records when each request arrives, so start-up (process start to the first
request) and the tail (last reply to exit) are reported too, and per stage the share of prompt characters
in the prefix shared by that stage's calls within a step (what a provider's prompt cache can serve).
`--answers symbolic` writes the references as square roots, so scoring needs math-verify's processes.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from engine import PROBLEM, scripted_server, stage_waves, write_problems

STAGE_MARKERS = (("consolidate", "<proposed_changes>"), ("group", "<attempt "), ("summary", "<trajectory>"))


def stage_of(messages: list[dict]) -> str:
    first = messages[0]["content"]
    return next((stage for stage, marker in STAGE_MARKERS if marker in first), "rollout")


def shared_prefix_share(prompts: list[str]) -> float:
    """Share of these prompts' characters that lie in the prefix common to all of them."""
    if len(prompts) < 2:
        return 1.0
    common = os.path.commonprefix(prompts)
    return len(common) * len(prompts) / sum(len(p) for p in prompts)


def prefix_shares(log: list[dict], step_starts: list[float]) -> dict[str, float]:
    """Per stage, the mean over steps of the shared-prefix share of that step's prompts (all messages joined)."""
    by_stage: dict[str, list[float]] = {}
    bounds = [*step_starts, float("inf")]
    for start, end in zip(bounds, bounds[1:], strict=False):
        stages: dict[str, list[str]] = {}
        for entry in log:
            if start <= entry["t"] < end:
                text = "\n".join(str(m.get("content") or "") for m in entry["messages"])
                stages.setdefault(stage_of(entry["messages"]), []).append(text)
        for stage, prompts in stages.items():
            if len(prompts) > 1:
                by_stage.setdefault(stage, []).append(shared_prefix_share(prompts))
    return {stage: sum(v) / len(v) for stage, v in by_stage.items()}


def run_steps(
    latency_s: float,
    *,
    queries: int = 30,
    group_size: int = 5,
    epochs: int = 2,
    batch_size: int = 10,
    concurrency: int = 64,
    symbolic: bool = False,
    dedup: str = "hint",
    spread: float = 0.0,
    root: Path | None = None,
) -> dict:
    """`tfgrpo learn` as a fresh process; wall time from process start, against the bound of its steps.
    `spread`: the server's latencies vary around `latency_s` (engine.request_latency); the report then has
    the step-by-step bounds of `overlap_bounds`. `root`: the checkout whose code runs (default: this one)."""
    import subprocess
    import urllib.request

    with scripted_server(latency_s, spread) as port, tempfile.TemporaryDirectory() as tmp:
        data = write_problems(Path(tmp) / "train.jsonl", queries, symbolic=symbolic)
        out = Path(tmp) / "run"
        command = [sys.executable, "-m", "tfgrpo", "learn", "--data", str(data), "--out", str(out)]
        command += ["--backend", "openai", "--model", "bench", "--base-url", f"http://127.0.0.1:{port}/v1"]
        command += ["--api-key", "x", "-G", str(group_size), "--epochs", str(epochs)]
        command += ["--batch-size", str(batch_size), "--concurrency", str(concurrency), "--dedup", dedup]
        env = {**os.environ, "PYTHONPATH": str(root or Path(__file__).resolve().parent.parent)}
        started = time.time()
        finished = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        total_s = time.time() - started
        if finished.returncode != 0:
            raise SystemExit(f"tfgrpo learn failed ({finished.returncode}):\n{finished.stderr[-3000:]}")
        metrics = json.loads((out / "metrics.json").read_text())
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/log") as response:
            log = json.loads(response.read())
    report = steps_report(metrics, log, started=started, total_s=total_s, concurrency=concurrency, latency_s=latency_s)
    return {**report, **overlap_bounds(log)} if spread > 0 else report


def overlap_bounds(log: list[dict]) -> dict[str, float]:
    """From the server's log (each request's latency), the least time the steps' requests can take in total:

    - `stagewise_bound_s`: each stage waits for the whole batch's previous stage (a step's rollouts, then its
      summaries, then its group analyses, then the consolidation): per step, the sum of each stage's slowest
      request;
    - `per_query_bound_s`: each query goes on to its next stage when its own previous one is done, and the
      consolidation waits for every query: per step, the slowest query's chain plus the consolidation;
    - `span_s`: what the run took, from its first request's arrival to its last reply.
    """
    stagewise = per_query = 0.0
    step: list[dict] = []
    for entry in log:
        step.append(entry)
        if stage_of(entry["messages"]) != "consolidate":
            continue
        slowest: dict[str, float] = {}
        chains: dict[tuple[str, str], float] = {}
        for request in step[:-1]:
            stage = stage_of(request["messages"])
            text = "\n".join(str(m.get("content") or "") for m in request["messages"])
            query = PROBLEM.search(text).group(0)
            slowest[stage] = max(slowest.get(stage, 0.0), request["latency"])
            chains[(query, stage)] = max(chains.get((query, stage), 0.0), request["latency"])
        queries = {query for query, _ in chains}
        consolidation = entry["latency"]
        stagewise += sum(slowest.values()) + consolidation
        per_query += max(sum(chains.get((q, s), 0.0) for s in ("rollout", "summary", "group")) for q in queries)
        per_query += consolidation
        step = []
    span = log[-1]["t"] + log[-1]["latency"] - log[0]["t"]  # first request's arrival to the last reply
    return {"stagewise_bound_s": stagewise, "per_query_bound_s": per_query, "span_s": span}


def steps_report(
    metrics: dict, log: list[dict], *, started: float, total_s: float, concurrency: int, latency_s: float
):
    """The steps workload's row: wall time against the bound of its steps, start-up, tail and prefix sharing."""
    steps = metrics["steps"]
    calls = {tag: t["calls"] for tag, t in metrics["sessions"][-1]["usage"]["by_tag"].items()}
    per_step = {tag: math.ceil(count / len(steps)) for tag, count in calls.items()}
    bound = sum(stage_waves(per_step, concurrency, latency_s).values()) * len(steps)
    first_request_s = log[0]["t"] - started
    # a step starts with its rollouts: the first rollout request after the previous step's consolidation
    step_starts, previous = [], "consolidate"
    for entry in log:
        stage = stage_of(entry["messages"])
        if stage == "rollout" and previous == "consolidate":
            step_starts.append(entry["t"])
        previous = stage
    return {
        "latency_ms": latency_s * 1000,
        "steps": len(steps),
        "requests": len(log),
        "calls": calls,
        "bound_s": bound,
        "total_s": total_s,
        "first_request_s": first_request_s,
        "ratio": total_s / bound,
        "ratio_after_start": (total_s - first_request_s) / bound,
        "prefix_share": prefix_shares(log, step_starts),
        "tail_s": started + total_s - log[-1]["t"] - latency_s,  # from the last reply to the process's exit
        "status": metrics["status"],
        "stages": [s["stage_seconds"] for s in steps],
    }


def compile_project(root: Path | None = None) -> None:
    """Byte-compile the project once, as a user's first run does: where PYTHONDONTWRITEBYTECODE is set (this
    sandbox), every start would otherwise compile ~100 modules again (~0.1-0.2 s before the first request)."""
    import compileall

    root = root or Path(__file__).resolve().parent.parent
    for package in ("tfgrpo", "experiences", "rewards", "eval", "finetune"):
        compileall.compile_dir(root / package, quiet=1)


MEDIAN_KEYS = ("first_request_s", "tail_s", "total_s", "ratio", "ratio_after_start")


def steps_row(latency: str, run_label: str, r: dict) -> str:
    return (
        f"| {latency} | {run_label} | {r['steps']} | {r['requests']} | {r['bound_s']:.2f} s | {r['first_request_s']:.2f} s | "
        f"{r['tail_s']:.2f} s | {r['total_s']:.2f} s | {r['ratio']:.2f} | {r['ratio_after_start']:.2f} |"
    )


def main_steps(latencies_ms: list[float], verbose: bool = False, repeat: int = 1, *, symbolic: bool = False) -> None:
    compile_project()
    print(
        "| latency | run | steps | requests | critical-path bound | first request after start | last reply to exit | wall time (from process start) | ratio to bound | ratio without start-up |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    shares: dict[str, dict[str, float]] = {}
    for latency_ms in latencies_ms:
        runs = []
        for index in range(repeat):
            r = run_steps(latency_ms / 1000, symbolic=symbolic)
            runs.append(r)
            shares[f"{latency_ms:.0f} ms"] = r["prefix_share"]
            print(steps_row(f"{latency_ms:.0f} ms", str(index + 1), r), flush=True)
            if verbose:
                print(f"  stage seconds per step: {r['stages']}", flush=True)
        if repeat > 1:  # the median of each column: a shared machine's runs spread by a few tenths of a second
            median = {key: statistics.median(r[key] for r in runs) for key in MEDIAN_KEYS}
            print(steps_row(f"{latency_ms:.0f} ms", f"**median of {repeat}**", {**runs[0], **median}), flush=True)
    print("\nShare of prompt characters in the prefix shared by a stage's calls within one step (mean over steps):\n")
    print("| run | rollout | summary | group | consolidate (one call a step) |")
    print("|---|---|---|---|---|")
    for run_name, share in shares.items():
        cells = [f"{share[s]:.0%}" if s in share else "–" for s in ("rollout", "summary", "group", "consolidate")]
        print(f"| {run_name} | " + " | ".join(cells) + " |")
