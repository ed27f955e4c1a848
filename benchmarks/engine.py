"""How close does one learn epoch come to its critical path? (`python benchmarks/engine.py`)

Two workloads. `--workload epoch` (default): one epoch in one batch, inside this process (below).
`--workload steps`: the issue-16 run, `tfgrpo learn` as a fresh process (start-up included) with 30
problems x G=5, 2 epochs, batches of 10, concurrency 64 and the vector store on (dedup): 6 steps, so the
bound is 6 x 4 waves; the server records when the first request arrives, so start-up is reported too.
It also reports, per stage, the share of prompt tokens in the prefix shared by all that stage's calls
within a step (what a provider's prompt cache can serve).

A local OpenAI-compatible server (aiohttp on uvloop where installed, in its own process) answers every request after a fixed
latency with scripted replies: rollouts are right or wrong in turn (every group is mixed, so every
group is kept), summaries and group analyses are short, each group proposes one operation, and the
consolidation keeps them all. One epoch of N queries x G rollouts runs through the `openai` backend at
the given concurrency, with the whole dataset in one batch (the paper's setting).

The stages of a batch depend on each other (summaries need rollouts, the group analysis needs
summaries, consolidation needs every group), so the fastest possible epoch is

    bound = wave(rollouts) + wave(summaries) + wave(group analyses) + consolidation calls x latency,
    wave(calls) = ceil(calls / concurrency) x latency,

and the ratio measured / bound shows what the engine, the client and the HTTP stack add. The
client-only floor sends the same number of calls per stage straight through `LLMClient` (no engine),
so measured / floor is the engine's own overhead.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import math
import multiprocessing
import os
import re
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PROBLEM = re.compile(r"What is (\d+)\+(\d+)\?")


def scripted_reply(messages: list[dict], count: int) -> str:
    """The reply to a request seen `count` times before."""
    first = messages[0]["content"]
    if "<proposed_changes>" in first:
        ops = re.findall(r"^\s+- (\{.*\})$", first, re.M)
        return "Keep them all.\n```json\n[" + ", ".join(ops) + "]\n```"
    if "<attempt " in first:
        a, b = PROBLEM.search(first).groups()
        return (
            f'```json\n[{{"option": "add", "experience": "When adding {a} and {b}, line up the digits first."}}]\n```'
        )
    if "<trajectory>" in first:
        return "1. The assistant added the numbers and boxed the result."
    a, b = map(int, PROBLEM.search(messages[-1]["content"]).groups())
    answer = a + b if count % 2 == 0 else a + b + 1
    return f"Attempt {count}: adding gives \\boxed{{{answer}}}"  # each sample's text differs: no summary is shared


def serve(port: int, latency_s: float, ready: multiprocessing.Event) -> None:
    from aiohttp import web

    seen: dict[str, int] = {}
    log: list[dict] = []  # arrival time and messages of every request, for /log

    async def completions(request: web.Request) -> web.Response:
        body = await request.json()
        log.append({"t": time.time(), "messages": body["messages"]})
        key = json.dumps(body["messages"], sort_keys=True)
        count = seen.get(key, 0)
        seen[key] = count + 1
        await asyncio.sleep(latency_s)
        text = scripted_reply(body["messages"], count)
        return web.json_response(
            {
                "id": "bench",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
            }
        )

    async def request_log(request: web.Request) -> web.Response:
        return web.json_response(log)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    app.router.add_get("/log", request_log)

    async def main() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port, backlog=1024).start()
        ready.set()
        await asyncio.Event().wait()

    try:  # the server must never be the bottleneck: uvloop where installed (aiohttp's usual pairing)
        import uvloop
    except ImportError:
        asyncio.run(main())
    else:
        uvloop.run(main())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def scripted_server(latency_s: float) -> Iterator[int]:
    """The scripted OpenAI-compatible server in its own process for the duration of the block; yields its port."""
    port = free_port()
    ready = multiprocessing.Event()
    server = multiprocessing.Process(target=serve, args=(port, latency_s, ready), daemon=True)
    server.start()
    if not ready.wait(30):
        raise RuntimeError("benchmark server did not start")
    try:
        yield port
    finally:
        server.terminate()
        server.join()


def write_problems(path: Path, queries: int) -> Path:
    """`queries` addition problems ("What is i+(i+7)?") as the JSONL training set."""
    path.write_text(
        "".join(
            json.dumps({"id": f"q{i}", "problem": f"What is {i}+{i + 7}?", "answer": str(2 * i + 7)}) + "\n"
            for i in range(queries)
        )
    )
    return path


def wave(calls: int, concurrency: int, latency_s: float) -> float:
    return math.ceil(calls / concurrency) * latency_s if calls else 0.0


def stage_waves(calls: dict[str, int], concurrency: int, latency_s: float) -> dict[str, float]:
    """The fastest each stage of one batch can be: parallel waves, except the one consolidation call per batch."""
    return {
        "rollout": wave(calls.get("rollout", 0), concurrency, latency_s),
        "summary": wave(calls.get("summary", 0), concurrency, latency_s),
        "group": wave(calls.get("group", 0), concurrency, latency_s),
        "consolidate": calls.get("consolidate", 0) * latency_s,
    }


def run(queries: int, group_size: int, concurrency: int, latency_s: float) -> dict:
    from rich.console import Console

    from tfgrpo.learn.config import LearnConfig
    from tfgrpo.learn.loop import learn

    with scripted_server(latency_s) as port, tempfile.TemporaryDirectory() as tmp:
        data = write_problems(Path(tmp) / "train.jsonl", queries)
        config = LearnConfig(
            data=str(data),
            out=str(Path(tmp) / "run"),
            group_size=group_size,
            epochs=1,
            dedup=False,
            llm={
                "backend": "openai",
                "model": "bench",
                "base_url": f"http://127.0.0.1:{port}/v1",
                "api_key": "x",
                "concurrency": concurrency,
                "max_retries": 0,
            },
        )
        started = time.perf_counter()
        result = learn(config, console=Console(file=io.StringIO()))
        total_s = time.perf_counter() - started
        calls = {tag: t["calls"] for tag, t in result.metrics["sessions"][-1]["usage"]["by_tag"].items()}
        floor = asyncio.run(client_floor(config, calls))
    step = result.metrics["steps"][0]
    waves = stage_waves(calls, concurrency, latency_s)
    bound = sum(waves.values())
    return {
        "queries": queries,
        "G": group_size,
        "concurrency": concurrency,
        "latency_ms": latency_s * 1000,
        "calls": calls,
        "bound_s": bound,
        "step_s": step["wall_time_s"],
        "total_s": total_s,
        "ratio": step["wall_time_s"] / bound,
        "floor_s": floor,
        "stages": step["stage_seconds"],
        "waves": waves,
        "ops_applied": step["ops_applied"],
        "status": result.status,
    }


async def client_floor(config, calls: dict[str, int]) -> float:
    """The same stages' calls sent straight through the client (no engine): what the HTTP stack alone costs."""
    from tfgrpo.llm.factory import build_client
    from tfgrpo.llm.types import SamplingParams

    client = build_client(config.llm)
    started = time.perf_counter()
    try:
        for stage, marker in (
            ("rollout", ""),
            ("summary", "<trajectory>"),
            ("group", "<attempt "),
            ("consolidate", "<proposed_changes>"),
        ):
            await asyncio.gather(
                *(
                    client.chat(
                        [{"role": "user", "content": f"{marker} What is {i}+1? floor"}],
                        sampling=SamplingParams(temperature=0),
                    )
                    for i in range(calls.get(stage, 0))
                )
            )
    finally:
        await client.aclose()
    return time.perf_counter() - started


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
) -> dict:
    """`tfgrpo learn` as a fresh process; wall time from process start, against the bound of its steps."""
    import subprocess
    import urllib.request

    with scripted_server(latency_s) as port, tempfile.TemporaryDirectory() as tmp:
        data = write_problems(Path(tmp) / "train.jsonl", queries)
        out = Path(tmp) / "run"
        command = [sys.executable, "-m", "tfgrpo", "learn", "--data", str(data), "--out", str(out)]
        command += ["--backend", "openai", "--model", "bench", "--base-url", f"http://127.0.0.1:{port}/v1"]
        command += ["--api-key", "x", "-G", str(group_size), "--epochs", str(epochs)]
        command += ["--batch-size", str(batch_size), "--concurrency", str(concurrency), "--dedup"]
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
        started = time.time()
        finished = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        total_s = time.time() - started
        if finished.returncode != 0:
            raise SystemExit(f"tfgrpo learn failed ({finished.returncode}):\n{finished.stderr[-3000:]}")
        metrics = json.loads((out / "metrics.json").read_text())
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/log") as response:
            log = json.loads(response.read())
    return steps_report(metrics, log, started=started, total_s=total_s, concurrency=concurrency, latency_s=latency_s)


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


def compile_project() -> None:
    """Byte-compile the project once, as a user's first run does: where PYTHONDONTWRITEBYTECODE is set (this
    sandbox), every start would otherwise compile ~100 modules again (~0.1-0.2 s before the first request)."""
    import compileall

    root = Path(__file__).resolve().parent.parent
    for package in ("tfgrpo", "experiences", "rewards", "eval", "finetune"):
        compileall.compile_dir(root / package, quiet=1)


MEDIAN_KEYS = ("first_request_s", "tail_s", "total_s", "ratio", "ratio_after_start")


def steps_row(latency: str, run_label: str, r: dict) -> str:
    return (
        f"| {latency} | {run_label} | {r['steps']} | {r['requests']} | {r['bound_s']:.2f} s | {r['first_request_s']:.2f} s | "
        f"{r['tail_s']:.2f} s | {r['total_s']:.2f} s | {r['ratio']:.2f} | {r['ratio_after_start']:.2f} |"
    )


def main_steps(latencies_ms: list[float], verbose: bool = False, repeat: int = 1) -> None:
    compile_project()
    print(
        "| latency | run | steps | requests | critical-path bound | first request after start | last reply to exit | wall time (from process start) | ratio to bound | ratio without start-up |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    shares: dict[str, dict[str, float]] = {}
    for latency_ms in latencies_ms:
        runs = []
        for index in range(repeat):
            r = run_steps(latency_ms / 1000)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=["epoch", "steps"], default="epoch")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--group-size", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency-ms", type=float, nargs="+", default=[50.0])
    parser.add_argument("--verbose", action="store_true", help="also print the time of each stage")
    parser.add_argument("--repeat", type=int, default=1, help="steps workload: runs per latency, and their median")
    args = parser.parse_args()
    # Shared machines: say how busy this one was, since every ratio depends on it.
    print(
        f"{os.cpu_count()} CPU cores, load average {', '.join(f'{x:.2f}' for x in os.getloadavg())} (1, 5, 15 min) at start",
        flush=True,
    )
    if args.workload == "steps":
        main_steps(args.latency_ms, args.verbose, args.repeat)
        return
    print(
        "| queries x G | concurrency | latency | calls (rollout / summary / group / consolidate) | critical-path bound | client-only floor | measured epoch | ratio to bound | ratio to floor |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for latency_ms in args.latency_ms:
        r = run(args.queries, args.group_size, args.concurrency, latency_ms / 1000)
        c = r["calls"]
        print(
            f"| {r['queries']} x {r['G']} | {r['concurrency']} | {latency_ms:.0f} ms | "
            f"{c.get('rollout', 0)} / {c.get('summary', 0)} / {c.get('group', 0)} / {c.get('consolidate', 0)} | "
            f"{r['bound_s']:.2f} s | {r['floor_s']:.2f} s | {r['step_s']:.2f} s | {r['ratio']:.2f} | {r['step_s'] / r['floor_s']:.2f} |",
            flush=True,
        )
        if args.verbose:
            print(f"  stages measured: {r['stages']}\n  stages bound:    {r['waves']}", flush=True)


if __name__ == "__main__":
    main()
