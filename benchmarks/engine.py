"""How close does one learn epoch come to its critical path? (`python benchmarks/engine.py`)

Two workloads. `--workload epoch` (default): one epoch in one batch, inside this process (below).
`--workload steps`: the issue-16 run, `tfgrpo learn` as a fresh process (start-up included), in
`engine_steps.py` (`--repeat N` adds a median row; `--answers symbolic` makes scoring need math-verify).

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
import hashlib
import io
import json
import math
import multiprocessing
import os
import random
import re
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PROBLEM = re.compile(r"What is (\d+)\+(\d+)\?")


def scripted_reply(messages: list[dict], count: int) -> str:
    """The reply to a request whose question was asked `count` times before."""
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


def request_latency(latency_s: float, spread: float, key: str, count: int) -> float:
    """`latency_s`, or with `spread` > 0 a log-normal draw around it (median `latency_s`, sigma `spread`) seeded
    by the request itself, so two runs that send the same requests see the same latencies."""
    if spread <= 0:
        return latency_s
    seed = int.from_bytes(hashlib.sha256(f"{count}:{key}".encode()).digest()[:8], "big")
    return latency_s * math.exp(spread * random.Random(seed).gauss(0.0, 1.0))


def serve(port: int, latency_s: float, ready: multiprocessing.Event, spread: float = 0.0) -> None:
    from aiohttp import web

    seen: dict[str, int] = {}
    # a rollout is right or wrong in turn per question, whatever the experiences in its prompt: a prompt that
    # leaves one out (credit's leave-outs) is another key of `seen` but the same question
    asked: dict[str, int] = {}
    log: list[dict] = []  # arrival time, messages and latency of every request, for /log

    async def completions(request: web.Request) -> web.Response:
        body = await request.json()
        key = json.dumps(body["messages"], sort_keys=True)
        count = seen.get(key, 0)
        seen[key] = count + 1
        question = json.dumps(body["messages"][-1], sort_keys=True)
        turn = asked.get(question, 0)
        asked[question] = turn + 1
        latency = request_latency(latency_s, spread, key, count)
        log.append({"t": time.time(), "messages": body["messages"], "latency": latency})
        await asyncio.sleep(latency)
        text = scripted_reply(body["messages"], turn)
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
def scripted_server(latency_s: float, spread: float = 0.0) -> Iterator[int]:
    """The scripted OpenAI-compatible server in its own process for the duration of the block; yields its port.
    `spread`: each request's latency drawn around `latency_s` (see `request_latency`)."""
    port = free_port()
    ready = multiprocessing.Event()
    server = multiprocessing.Process(target=serve, args=(port, latency_s, ready, spread), daemon=True)
    server.start()
    if not ready.wait(30):
        raise RuntimeError("benchmark server did not start")
    try:
        yield port
    finally:
        server.terminate()
        server.join()


def write_problems(path: Path, queries: int, *, symbolic: bool = False) -> Path:
    """`queries` addition problems ("What is i+(i+7)?") as the JSONL training set; `symbolic` writes each
    answer as a square root (13 as \\sqrt{169}), which only math-verify decides (the verifier's processes)."""
    answers = [2 * i + 7 for i in range(queries)]
    path.write_text(
        "".join(
            json.dumps(
                {
                    "id": f"q{i}",
                    "problem": f"What is {i}+{i + 7}?",
                    "answer": f"\\sqrt{{{a * a}}}" if symbolic else str(a),
                }
            )
            + "\n"
            for i, a in enumerate(answers)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=["epoch", "steps"], default="epoch")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--group-size", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency-ms", type=float, nargs="+", default=[50.0])
    parser.add_argument("--verbose", action="store_true", help="also print the time of each stage")
    parser.add_argument("--repeat", type=int, default=1, help="steps workload: runs per latency, and their median")
    parser.add_argument(
        "--answers",
        choices=["integer", "symbolic"],
        default="integer",
        help="steps workload: references as integers (13) or as math-verify needs them (\\sqrt{169})",
    )
    args = parser.parse_args()
    # Shared machines: say how busy this one was, since every ratio depends on it.
    print(
        f"{os.cpu_count()} CPU cores, load average {', '.join(f'{x:.2f}' for x in os.getloadavg())} (1, 5, 15 min) at start",
        flush=True,
    )
    if args.workload == "steps":
        from engine_steps import main_steps  # the issue-16 run, in a module of its own

        main_steps(args.latency_ms, args.verbose, args.repeat, symbolic=args.answers == "symbolic")
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
