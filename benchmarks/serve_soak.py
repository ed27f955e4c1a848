"""A bounded soak of `tfgrpo serve` under hostile traffic: does every byte it holds stay bounded?

For `--minutes` (default 10) a real `tfgrpo serve` (client keys, SQLite traces) takes, all at once:
- header floods: heads of `X-Pad:` lines that never end (no blank line), 20 MB each, no key;
- slow heads: connections that send one header line every 3 s;
- endless streams: streamed requests whose upstream never stops sending;
- huge replies: an upstream JSON reply of 10 MB;
- `n` floods: `"n": 1000000` in a 230-byte request;
- feedback forgery: key B rates key A's exchanges, again and again;
- ordinary traffic from key A, which must keep being answered.
The serve process tree's RSS is sampled every second. At the end the table gives its peak, each attack's
outcomes by status, and the largest trace row the store holds (every column's bytes summed).

    OMP_NUM_THREADS=1 python benchmarks/serve_soak.py --minutes 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
KEY_A, KEY_B = "soak-key-a-0123456789", "soak-key-b-0123456789"

UPSTREAM = r"""
import asyncio, json, sys
from aiohttp import web

def reply(text):
    return {"id": "c", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}

async def chat(request):
    body = await request.json()
    last = body["messages"][-1]["content"]
    if "ENDLESS" in last and body.get("stream"):
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
                 "choices": [{"index": 0, "delta": {"content": "x" * 1000}, "finish_reason": None}]}
        line = ("data: " + json.dumps(chunk) + "\n\n").encode()
        try:
            while True:
                await response.write(line)
        except (ConnectionError, RuntimeError, asyncio.CancelledError):
            return response
    if "HUGE" in last:
        return web.json_response(reply("y" * 10_000_000))
    return web.json_response(reply("The answer is \\boxed{4}."))

async def models(request):
    return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

app = web.Application(client_max_size=1 << 20)
app.add_routes([web.post("/v1/chat/completions", chat), web.get("/v1/models", models)])
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tree_rss_mb(pid: int) -> float:
    """RSS of a process and its children (serve's workers), from /proc."""
    total, pending = 0, [pid]
    while pending:
        current = pending.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            total += next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except (OSError, StopIteration):
            continue
        pending += [int(child) for child in children]
    return total / 1024


def wait_for(url: str, process: subprocess.Popen, timeout_s: float = 120.0) -> None:
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{url}: the server exited ({process.returncode})")
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"{url}: not ready in {timeout_s:g} s")


def status_of(first_line: bytes) -> str:
    parts = first_line.split()
    return parts[1].decode() if len(parts) > 1 else "closed"


async def header_flood(port: int, outcomes: Counter, stop: float) -> None:
    line = b"X-Pad: " + b"p" * 1000 + b"\r\n"
    while time.monotonic() < stop:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: soak\r\n")
            for _ in range(20_000):  # 20 MB of head without its end
                writer.write(line)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        try:
            outcomes[status_of(await asyncio.wait_for(reader.readline(), 10))] += 1
        except (asyncio.TimeoutError, ConnectionError, OSError):
            outcomes["closed"] += 1
        writer.close()


async def slow_head(port: int, outcomes: Counter, stop: float) -> None:
    while time.monotonic() < stop:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /health HTTP/1.1\r\nHost: soak\r\n")
        status = "held"
        for index in range(40):  # two minutes of one line every 3 s, unless serve ends it first
            try:
                first = await asyncio.wait_for(reader.readline(), 3)
                status = status_of(first)
                break
            except asyncio.TimeoutError:
                try:
                    writer.write(f"X-Slow-{index}: 1\r\n".encode())
                    await writer.drain()
                except (ConnectionError, OSError):
                    status = "closed"
                    break
            except (ConnectionError, OSError):
                status = "closed"
                break
        outcomes[status] += 1
        writer.close()


def chat_body(text: str, **fields: object) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": text}], **fields}


async def endless_stream(session: aiohttp.ClientSession, url: str, outcomes: Counter, stop: float) -> None:
    while time.monotonic() < stop:
        received, cut = 0, "ended"
        try:
            async with session.post(url, json=chat_body("ENDLESS", stream=True)) as response:
                async for chunk in response.content.iter_any():
                    received += len(chunk)
                    if b'"error"' in chunk:
                        cut = "error event"
                    if received > 1_000_000_000:
                        cut = "unbounded"
                        break
                outcomes[f"{response.status} {cut}"] += 1
        except (aiohttp.ClientError, asyncio.TimeoutError) as error:
            outcomes[type(error).__name__] += 1


async def plain(session: aiohttp.ClientSession, url: str, outcomes: Counter, stop: float, body: dict) -> None:
    while time.monotonic() < stop:
        try:
            async with session.post(url, json=body) as response:
                await response.read()
                outcomes[str(response.status)] += 1
        except (aiohttp.ClientError, asyncio.TimeoutError) as error:
            outcomes[type(error).__name__] += 1
        await asyncio.sleep(0.05)


async def forgery(base: str, outcomes: Counter, stop: float) -> None:
    owner = aiohttp.ClientSession(headers={"authorization": f"Bearer {KEY_A}"})
    forger = aiohttp.ClientSession(headers={"authorization": f"Bearer {KEY_B}"})
    async with owner, forger:
        while time.monotonic() < stop:
            async with owner.post(base + "/v1/chat/completions", json=chat_body("What is 2+2?")) as response:
                exchange = response.headers.get("x-tfgrpo-exchange-id")
                await response.read()
            for _ in range(3):  # the same forged rating, again and again
                async with forger.post(base + "/v1/feedback", json={"id": exchange, "reward": 0.0}) as rated:
                    await rated.read()
                    outcomes[str(rated.status)] += 1
            await asyncio.sleep(0.05)


async def soak(base: str, port: int, minutes: float, serve_pid: int) -> dict:
    stop = time.monotonic() + minutes * 60
    outcomes = {name: Counter() for name in ("header flood", "slow head", "endless stream", "huge reply", "n flood")}
    outcomes |= {"forged feedback": Counter(), "ordinary": Counter()}
    peak = {"rss_mb": tree_rss_mb(serve_pid), "start_mb": tree_rss_mb(serve_pid)}

    async def sample() -> None:
        while time.monotonic() < stop:
            peak["rss_mb"] = max(peak["rss_mb"], tree_rss_mb(serve_pid))
            await asyncio.sleep(1)

    url = base + "/v1/chat/completions"
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(headers={"authorization": f"Bearer {KEY_A}"}, timeout=timeout) as session:
        await asyncio.gather(
            sample(),
            header_flood(port, outcomes["header flood"], stop),
            *(slow_head(port, outcomes["slow head"], stop) for _ in range(4)),
            *(endless_stream(session, url, outcomes["endless stream"], stop) for _ in range(2)),
            plain(session, url, outcomes["huge reply"], stop, chat_body("HUGE")),
            plain(session, url, outcomes["n flood"], stop, chat_body("What is 2+2?", n=1_000_000)),
            forgery(base, outcomes["forged feedback"], stop),
            *(plain(session, url, outcomes["ordinary"], stop, chat_body("What is 3+4?")) for _ in range(2)),
        )
    return {"outcomes": outcomes, **peak}


def largest_trace_row(path: Path) -> tuple[int, int]:
    with sqlite3.connect(path) as db:
        columns = [row[1] for row in db.execute("PRAGMA table_info(tfgrpo_exchanges)")]
        size = " + ".join(f"coalesce(length(CAST({name} AS BLOB)), 0)" for name in columns)
        rows, largest = db.execute(f"SELECT count(*), max({size}) FROM tfgrpo_exchanges").fetchone()
    return rows, largest or 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0)
    args = parser.parse_args()
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if "model name" in line), "?")
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        library = folder / "library.json"
        library.write_text(json.dumps({"version": 1, "experiences": [{"id": "G0", "text": "Check the carry."}]}))
        (folder / "keys.txt").write_text(f"{KEY_A}\n{KEY_B}\n")
        up_port, port = free_port(), free_port()
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
        upstream = subprocess.Popen([sys.executable, "-c", UPSTREAM, str(up_port)], env=env)
        serve_log = (folder / "serve.log").open("w")
        serve = subprocess.Popen(
            [sys.executable, "-m", "tfgrpo", "serve", "--library", str(library)]
            + ["--upstream", f"http://127.0.0.1:{up_port}/v1", "--port", str(port)]
            + ["--traces", str(folder / "traces.sqlite"), "--client-keys", str(folder / "keys.txt")],
            env=env,
            stderr=serve_log,
        )
        try:
            wait_for(f"http://127.0.0.1:{up_port}/v1/models", upstream)
            wait_for(f"http://127.0.0.1:{port}/health", serve)
            load_before = os.getloadavg()[0]
            result = asyncio.run(soak(f"http://127.0.0.1:{port}", port, args.minutes, serve.pid))
            rows, largest = largest_trace_row(folder / "traces.sqlite")
        finally:
            serve.terminate()
            upstream.terminate()
            serve.wait(30)
            upstream.wait(30)
    print(f"tfgrpo serve soak, {args.minutes:g} min; {cpu}, {os.cpu_count()} cores; ")
    print(
        f"load {load_before:.1f} -> {os.getloadavg()[0]:.1f}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n"
    )
    print("| attack | outcomes (status: count) |")
    print("|---|---|")
    for name, counts in result["outcomes"].items():
        print(f"| {name} | {', '.join(f'{status}: {n}' for status, n in counts.most_common()) or '-'} |")
    print(f"\nserve RSS: {result['start_mb']:.0f} MB at start, peak {result['rss_mb']:.0f} MB")
    print(f"trace rows: {rows:,}; the largest {largest:,} bytes")


if __name__ == "__main__":
    main()
