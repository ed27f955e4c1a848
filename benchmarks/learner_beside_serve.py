"""Does `tfgrpo learner` slow `tfgrpo serve`? Chat latency through serve without, with, and again without
a learner following the same trace store.

Three processes besides this client: a scripted upstream (tests/helpers/learn_world.py's world, a fixed
latency per reply) that serves both serve's traffic and the learner's rollouts and stages; `tfgrpo serve`
(SQLite traces, access log to a file, as deployed); and, in the middle phase only, `tfgrpo learner`
reading the store every 0.2 s and running a learn round every `--propose-every` rated exchanges. The
client sends "What is A+B?" from `--concurrency` clients and rates every reply with its gold answer, so the
learner always has work. Nothing decides the tests here, so this script rolls every proposed challenger
back at once: the learner keeps learning through its whole phase.

    OMP_NUM_THREADS=1 python benchmarks/learner_beside_serve.py                   # 3 phases x 1500 requests
    python benchmarks/learner_beside_serve.py --requests 2000 --concurrency 16 --latency-ms 20
    python benchmarks/learner_beside_serve.py --nice 19                            # the learner niced

The table: p50/p95/p99 of the chat requests of each phase, its throughput, the learner's rounds and CPU
seconds in that phase, and the 1-minute load average at its end. Give the CPU model and load with it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import aiohttp
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import serve as serve_bench  # noqa: E402  (benchmarks/serve.py: the process helpers)

from tests.helpers.live_traces import seed_deployment  # noqa: E402
from tests.helpers.servers import free_port  # noqa: E402

UPSTREAM_CODE = """
import sys, uvicorn
sys.path.insert(0, {root!r})
from tests.helpers.learn_world import World
from tests.helpers.serve_upstream import ScriptedUpstream
uvicorn.run(ScriptedUpstream(latency_s={latency}, responder=World().reply_for, record=False), host="127.0.0.1",
            port={port}, log_level="warning", access_log=False, backlog=4096)
"""


def start(command: list[str], log: Path) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
    with open(log, "w") as stderr:
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr, env=env)


async def phase(url: str, requests: int, concurrency: int, seed: int) -> tuple[list[float], float]:
    """`requests` chats from `concurrency` clients, each rated; the chat latencies (s) and the wall time."""
    rng = random.Random(seed)
    pairs = [(rng.randint(1, 99), rng.randint(1, 99)) for _ in range(requests)]
    latencies: list[float] = []
    async with aiohttp.ClientSession() as session:

        async def client(position: int) -> None:
            for a, b in pairs[position::concurrency]:
                body = {"model": "m", "messages": [{"role": "user", "content": f"What is {a}+{b}?"}]}
                started = time.perf_counter()
                async with session.post(url + "/v1/chat/completions", json=body) as response:
                    await response.read()
                    exchange_id = response.headers["x-tfgrpo-exchange-id"]
                    assert response.status == 200, response.status
                latencies.append(time.perf_counter() - started)
                rated = {"id": exchange_id, "gold": str(a + b)}
                async with session.post(url + "/v1/feedback", json=rated) as response:
                    await response.read()

        began = time.perf_counter()
        await asyncio.gather(*(client(position) for position in range(concurrency)))
    return latencies, time.perf_counter() - began


def roll_back_challengers(deployment, stop: threading.Event) -> None:
    """Stand in for the sequential test: every challenger leaves at once, so the learner never waits."""
    from tfgrpo.serve.deployment import StaleRevision

    while not stop.wait(0.1):
        state = deployment.state()
        if state is not None and state.challenger is not None:
            try:
                deployment.end_test(state, "rollback", rule="benchmark", by="benchmark")
            except StaleRevision:
                pass


def learner_rounds(out: Path) -> str:
    """Rounds begun / proposed so far."""
    state = out / "state.json"
    rounds = json.loads(state.read_text())["rounds"] if state.is_file() else []
    return f"{len(rounds)} / {sum(r['status'] == 'proposed' for r in rounds)}"


def row(name: str, latencies: list[float], wall: float, rounds: str, cpu: str) -> str:
    p50, p95, p99 = (np.percentile(latencies, q) * 1000 for q in (50, 95, 99))
    rate = len(latencies) / wall
    return f"| {name} | {p50:.1f} | {p95:.1f} | {p99:.1f} | {rate:.0f} | {rounds} | {cpu} | {serve_bench.load_average():.2f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1500, help="chat requests per phase")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--latency-ms", type=float, default=20.0, help="the upstream's latency per reply")
    parser.add_argument(
        "--propose-every", type=int, default=24, help="the learner's rated exchanges (and prompts) per round"
    )
    parser.add_argument("--nice", type=int, default=0, help="run the learner under `nice -n N` (0: as serve)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, store, learner run)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tfgrpo-learner-bench-"))
    upstream_port, serve_port = free_port(), free_port()
    upstream_url, url = f"http://127.0.0.1:{upstream_port}", f"http://127.0.0.1:{serve_port}"
    traces = work / "traces.sqlite"
    deployment, store = seed_deployment(traces)
    store.close()
    (work / "library.json").write_text(deployment.library(deployment.state().champion).to_json())
    code = UPSTREAM_CODE.format(root=str(ROOT), latency=args.latency_ms / 1000, port=upstream_port)
    processes = [start([sys.executable, "-c", code], work / "upstream.log")]
    stop = threading.Event()
    try:
        serve_bench.wait_ready(upstream_url + "/v1/models", processes[0], work / "upstream.log")
        serve = [sys.executable, "-m", "tfgrpo", "serve", "--library", str(work / "library.json")]
        serve += ["--upstream", upstream_url + "/v1", "--traces", str(traces), "--port", str(serve_port)]
        processes.append(start(serve, work / "serve.log"))
        serve_bench.wait_ready(url + "/health", processes[1], work / "serve.log", workers=1)
        asyncio.run(phase(url, 2 * args.concurrency, args.concurrency, seed=0))  # warm both servers
        print("| phase | p50 ms | p95 ms | p99 ms | req/s | learner rounds begun / proposed | learner CPU s | load |")
        print("|---|---|---|---|---|---|---|---|")
        latencies, wall = asyncio.run(phase(url, args.requests, args.concurrency, seed=1))
        print(row("without the learner", latencies, wall, "-", "-"), flush=True)
        learner = ["nice", "-n", str(args.nice)] if args.nice else []
        learner += [sys.executable, "-m", "tfgrpo", "learner", "--traces", str(traces), "--out", str(work / "learner")]
        learner += ["--settle-s", "0", "--poll-interval-s", "0.2", "--propose-every", str(args.propose_every)]
        learner += ["--max-problems", str(args.propose_every)]
        learner += ["--backend", "openai", "--model", "m", "--base-url", upstream_url + "/v1", "-G", "4"]
        processes.append(start(learner, work / "learner.log"))
        while not (work / "learner" / "events.log").is_file():  # it has opened the store
            if processes[2].poll() is not None:
                raise RuntimeError((work / "learner.log").read_text()[-3000:])
            time.sleep(0.1)
        threading.Thread(target=roll_back_challengers, args=(deployment, stop), daemon=True).start()
        cpu_before = serve_bench.cpu_seconds(processes[2].pid)
        latencies, wall = asyncio.run(phase(url, args.requests, args.concurrency, seed=2))
        cpu = serve_bench.cpu_seconds(processes[2].pid) - cpu_before
        print(row("with the learner", latencies, wall, learner_rounds(work / "learner"), f"{cpu:.1f}"))
        stop.set()
        processes.pop().terminate()
        latencies, wall = asyncio.run(phase(url, args.requests, args.concurrency, seed=3))
        print(row("without, again", latencies, wall, "-", "-"))
    finally:
        stop.set()
        for process in reversed(processes):
            process.terminate()
            process.wait(timeout=30)
        if args.keep:
            print(f"work folder: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
