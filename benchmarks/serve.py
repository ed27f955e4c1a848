"""Proxy overhead of `tfgrpo serve`: latency through the proxy minus latency straight to the upstream.

A local upstream answers every chat completion after a fixed latency (JSON, or SSE in 5 events).
For each concurrency level and mode, the same number of requests goes (1) straight to the upstream and
(2) through `tfgrpo serve` (library injected, traces written to SQLite); the table shows p50/p99 of
each and their differences. Client, proxy and upstream run as three processes. A request is lost when
it does not come back 200 with the whole body (a stream must end with `data: [DONE]`).

    OMP_NUM_THREADS=1 python benchmarks/serve.py                       # 1, 64, 256 clients; JSON and SSE
    python benchmarks/serve.py --concurrency 64 --requests 10000 --modes json   # the "none lost" run
    python benchmarks/serve.py --latency-ms 200 --concurrency 64 --arrivals staggered  # independent clients
    python benchmarks/serve.py --latency-ms 0 --concurrency 256 --modes json     # capacity: req/s one worker proxies
    python benchmarks/serve.py --concurrency 64 --modes json --profile prof.txt  # + py-spy profile of the proxy
    python benchmarks/serve.py --latency-ms 200 --concurrency 64 --workers 2     # two worker processes

"proxy req/s" is the proxied run's throughput (requests / wall time); "proxy CPU / request" is the user+system
CPU time of the proxy's processes (all workers and their supervisor) per request, and "req/s per core"
1000 / that: what one fully busy core could proxy. "load" is the 1-minute load average when the cell ended.
The proxy runs as deployed: access log on (to a file), SQLite traces; `--proxy-args '--no-access-log'` to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from tfgrpo.experiences import Experience, Library  # noqa: E402

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}]

UPSTREAM_CODE = """
import sys, uvicorn
sys.path.insert(0, {tests!r})
from tests.helpers.serve_upstream import ScriptedUpstream
uvicorn.run(ScriptedUpstream(latency_s={latency}, record=False), host="127.0.0.1", port={port}, log_level="warning", access_log=False, backlog=4096)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc): the proxy's own cost, whatever the load."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proxy_cpu_seconds(pid: int) -> float:
    """CPU time of the proxy and its worker processes (`--workers N` forks them), dead children included."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    kids = [int(child) for child in children.read_text().split()] if children.exists() else []
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    reaped = (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
    return cpu_seconds(pid) + reaped + sum(cpu_seconds(kid) for kid in kids)


def wait_ready(url: str, process: subprocess.Popen, log: Path, *, workers: int = 0, timeout_s: float = 60.0) -> None:
    """Until `url` answers and, for a proxy, `workers` workers logged their start (`log`: the server's stderr)."""
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited: {log.read_text()[-3000:]}")
        try:
            urllib.request.urlopen(url, timeout=1)
            if log.read_text().count('"event": "worker_started"') >= workers:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer: {log.read_text()[-3000:]}")


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


async def one(session: aiohttp.ClientSession, url: str, body: bytes, stream: bool) -> float | None:
    started = time.perf_counter()
    try:
        async with session.post(url, data=body, headers={"content-type": "application/json"}) as response:
            payload = await response.read()
            if response.status != 200:
                return None
            if stream and not payload.rstrip().endswith(b"data: [DONE]"):
                return None
            if not stream and b'"choices"' not in payload:
                return None
    except aiohttp.ClientError:
        return None
    return time.perf_counter() - started


async def load(
    url: str, *, concurrency: int, requests: int, stream: bool, stagger_s: float = 0.0
) -> tuple[np.ndarray, int, float]:
    """`concurrency` clients, each sending its next request when the last one came back. `stagger_s` > 0:
    client i sends its first request i/concurrency of that time late, so independent clients do not all
    arrive in the same millisecond (with a fixed-latency upstream, clients started together stay in step
    for the whole run and every request meets a queue of `concurrency` others)."""
    body = json.dumps({"model": "m", "messages": MESSAGES, "stream": stream}).encode()
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    latencies: list[float] = []
    lost = 0
    queue = iter(range(requests))
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as session:
        await one(session, url, body, stream)  # warm the connection pool and both servers
        started = time.perf_counter()

        async def worker(position: int) -> None:
            nonlocal lost
            await asyncio.sleep(stagger_s * position / concurrency)
            for _ in queue:
                latency = await one(session, url, body, stream)
                if latency is None:
                    lost += 1
                else:
                    latencies.append(latency)

        await asyncio.gather(*(worker(position) for position in range(concurrency)))
        wall_s = time.perf_counter() - started
    return np.asarray(latencies) * 1000.0, lost, wall_s


def start_profiler(pid: int, out: str) -> subprocess.Popen | None:
    """py-spy sampling the proxy until stopped (SIGINT makes it write `out`); None without py-spy."""
    spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if spy is None:
        print("(py-spy is not installed: pip install py-spy; no profile)")
        return None
    return subprocess.Popen(
        [spy, "record", "--threads", "--pid", str(pid), "--format", "raw", "--output", out, "--rate", "200"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def one_cell(
    args: argparse.Namespace,
    proxy_pid: int,
    up_port: int,
    proxy_port: int,
    concurrency: int,
    requests: int,
    stream: bool,
) -> dict[str, float]:
    """One run of a cell: the requests straight to the upstream, then through the proxy."""
    path = "/v1/chat/completions"
    stagger_s = args.latency_ms / 1000 if args.arrivals == "staggered" else 0.0
    shape = {"concurrency": concurrency, "requests": requests, "stream": stream, "stagger_s": stagger_s}
    direct, lost_direct, _ = asyncio.run(load(f"http://127.0.0.1:{up_port}{path}", **shape))
    cpu_before = proxy_cpu_seconds(proxy_pid)
    profiler = start_profiler(proxy_pid, args.profile) if args.profile else None
    proxied, lost, wall_s = asyncio.run(load(f"http://127.0.0.1:{proxy_port}{path}", **shape))
    cpu_ms = (proxy_cpu_seconds(proxy_pid) - cpu_before) * 1000 / (requests + 1)
    if profiler is not None:
        profiler.send_signal(signal.SIGINT)
        profiler.wait(timeout=60)
    d50, d99 = np.percentile(direct, [50, 99])
    p50, p99 = np.percentile(proxied, [50, 99])
    return {
        "d50": d50,
        "d99": d99,
        "p50": p50,
        "p99": p99,
        "o50": p50 - d50,
        "o99": p99 - d99,
        "rate": requests / wall_s,
        "cpu_ms": cpu_ms,
        "per_core": 1000.0 / cpu_ms if cpu_ms else float("nan"),
        "load": load_average(),
        "lost": lost,
        "lost_direct": lost_direct,
    }


#: issue 30's target for the proxy's CPU per proxied request (user + system of all its processes)
CPU_TARGET_MS = 0.4


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 64, 256])
    parser.add_argument(
        "--requests", type=int, default=None, help="Per cell (default: 200 at 1 client, 2000 otherwise)."
    )
    parser.add_argument("--modes", nargs="+", default=["json", "stream"], choices=["json", "stream"])
    parser.add_argument("--latency-ms", type=float, default=20.0, help="Fixed upstream latency.")
    parser.add_argument(
        "--arrivals",
        choices=["together", "staggered"],
        default="together",
        help="together: every client starts at once and, against a fixed latency, stays in step (bursts of "
        "`clients` requests); staggered: client i starts i/clients of one upstream latency late (independent users).",
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="Runs per cell; the table shows each column's median (lost: the most)."
    )
    parser.add_argument(
        "--profile", default=None, help="Write a py-spy profile (raw format) of the proxied runs here."
    )
    parser.add_argument("--workers", type=int, default=1, help="`tfgrpo serve --workers N`: worker processes.")
    parser.add_argument(
        "--proxy-args", default="", help="Extra `tfgrpo serve` options, e.g. '--no-access-log' (one string)."
    )
    args = parser.parse_args()
    print(
        f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}  cores: {os.cpu_count()}"
    )
    env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory() as scratch:
        library = Path(scratch) / "library.json"
        Library(
            version=1,
            experiences=[
                Experience(id=f"G{i}", text=f"Lesson number {i}: check the units and the carry.") for i in range(20)
            ],
        ).save(library)
        up_port, proxy_port = free_port(), free_port()
        up_log, proxy_log = Path(scratch) / "upstream.log", Path(scratch) / "proxy.log"
        upstream = subprocess.Popen(
            [
                sys.executable,
                "-c",
                UPSTREAM_CODE.format(tests=str(ROOT / "tests"), latency=args.latency_ms / 1000, port=up_port),
            ],
            env=env,
            stderr=up_log.open("w"),
        )
        proxy = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tfgrpo",
                "serve",
                "--library",
                str(library),
                "--upstream",
                f"http://127.0.0.1:{up_port}/v1",
                "--port",
                str(proxy_port),
                "--traces",
                str(Path(scratch) / "traces.sqlite"),
                "--workers",
                str(args.workers),
                *args.proxy_args.split(),
            ],
            env=env,
            stderr=proxy_log.open("w"),  # the access log: one line per request, never a pipe nobody reads
        )
        try:
            wait_ready(f"http://127.0.0.1:{up_port}/v1/models", upstream, up_log)
            wait_ready(f"http://127.0.0.1:{proxy_port}/health", proxy, proxy_log, workers=args.workers)
            print(
                f"upstream latency {args.latency_ms:g} ms; library of 20 experiences injected; traces in SQLite; "
                f"clients start {args.arrivals}; {args.workers} worker(s)\n"
            )
            header = "| clients | mode | requests | direct p50 | direct p99 | proxy p50 | proxy p99 | overhead p50 | overhead p99 | proxy req/s | proxy CPU / request | req/s per core | lost | load |"
            print(header)
            print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
            cpu_per_request = []
            for concurrency in args.concurrency:
                for mode in args.modes:
                    requests = args.requests or (200 if concurrency == 1 else 2000)
                    runs = [
                        one_cell(args, proxy.pid, up_port, proxy_port, concurrency, requests, mode == "stream")
                        for _ in range(args.repeat)
                    ]
                    cell = {key: float(np.median([run[key] for run in runs])) for key in runs[0]}
                    lost, lost_direct = max(run["lost"] for run in runs), max(run["lost_direct"] for run in runs)
                    print(
                        f"| {concurrency} | {mode} | {requests} | {cell['d50']:.2f} ms | {cell['d99']:.2f} ms | "
                        f"{cell['p50']:.2f} ms | {cell['p99']:.2f} ms | {cell['o50']:+.2f} ms | {cell['o99']:+.2f} ms | "
                        f"{cell['rate']:.0f} | {cell['cpu_ms']:.2f} ms | {cell['per_core']:.0f} | {lost:.0f}"
                        + (f" (direct lost {lost_direct:.0f})" if lost_direct else "")
                        + f" | {cell['load']:.1f} |",
                        flush=True,
                    )
                    cpu_per_request.append(cell["cpu_ms"])
            worst = max(cpu_per_request)
            verdict = "met" if worst <= CPU_TARGET_MS else "NOT met"
            print(f"\nproxy CPU per request: at most {worst:.2f} ms (target <= {CPU_TARGET_MS} ms): {verdict}")
        finally:
            for process in (proxy, upstream):
                process.terminate()
                process.wait(timeout=30)
    print(f"\nuptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")


if __name__ == "__main__":
    main()
