"""Client CPU per call: the openai SDK's default httpx transport against its aiohttp one (`DefaultAioHttpClient`).

    OMP_NUM_THREADS=1 python benchmarks/transport.py [--calls 1200] [--concurrency 64] [--latency-ms 200] [--rounds 3]

The engine benchmark's server (aiohttp on uvloop, its own process, fixed latency) answers; this process
sends `--calls` chat calls through `LLMClient` + `OpenAIBackend` in waves of `--concurrency`, once per
transport per round (alternating, so a busy neighbour hurts both alike). Reported: this process's CPU
seconds per call (`time.process_time`, robust to other load on the machine) and the wall time against
the waves' bound (ceil(calls / concurrency) x latency).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from engine import free_port, serve  # noqa: E402  (the same scripted server as the engine benchmark)

from tfgrpo.llm.backends.openai_backend import OpenAIBackend  # noqa: E402
from tfgrpo.llm.client import LLMClient  # noqa: E402
from tfgrpo.llm.types import SamplingParams  # noqa: E402


async def one_round(base_url: str, transport: str, calls: int, concurrency: int, offset: int) -> tuple[float, float]:
    backend = OpenAIBackend("bench", base_url=base_url, api_key="x", transport=transport)
    client = LLMClient(backend, concurrency=concurrency, max_retries=0)
    sampling = SamplingParams(temperature=0)
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        await asyncio.gather(
            *(
                client.chat(
                    [{"role": "user", "content": f"What is {offset + i}+1?"}], sampling=sampling, tag="rollout"
                )
                for i in range(calls)
            )
        )
    finally:
        await client.aclose()
    return time.process_time() - cpu, time.perf_counter() - wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1200)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(
        f"{os.cpu_count()} CPU cores, load average {', '.join(f'{x:.2f}' for x in os.getloadavg())} (1, 5, 15 min) at start",
        flush=True,
    )
    port = free_port()
    ready = multiprocessing.Event()
    server = multiprocessing.Process(target=serve, args=(port, args.latency_ms / 1000, ready), daemon=True)
    server.start()
    if not ready.wait(30):
        raise SystemExit("benchmark server did not start")
    base_url = f"http://127.0.0.1:{port}/v1"
    results: dict[str, list[tuple[float, float]]] = {"httpx": [], "aiohttp": []}
    try:
        for round_index in range(args.rounds):
            for transport in results:
                offset = (round_index * 2 + len(results[transport])) * args.calls
                results[transport].append(
                    asyncio.run(one_round(base_url, transport, args.calls, args.concurrency, offset))
                )
    finally:
        server.terminate()
        server.join()
    bound = math.ceil(args.calls / args.concurrency) * args.latency_ms / 1000
    print(
        f"\n{args.calls} calls, concurrency {args.concurrency}, {args.latency_ms:.0f} ms server; median of {args.rounds} rounds\n"
    )
    print("| transport | client CPU per call | wall time | waves' bound | ratio |")
    print("|---|---|---|---|---|")
    for transport, rows in results.items():
        cpu = statistics.median(r[0] for r in rows)
        wall = statistics.median(r[1] for r in rows)
        print(f"| {transport} | {cpu / args.calls * 1e3:.2f} ms | {wall:.2f} s | {bound:.2f} s | {wall / bound:.2f} |")


if __name__ == "__main__":
    main()
