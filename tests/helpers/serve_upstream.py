"""Test servers for `tfgrpo serve`: a scripted OpenAI-compatible upstream, a way to run any ASGI app, and
`tfgrpo serve` itself as a subprocess (its log in a file, read while it runs).

    upstream = ScriptedUpstream(latency_s=0.0)         # raw ASGI: chat completions (JSON and SSE), /v1/models
    upstream.push(Fault(status=429, headers={"retry-after": "0"}))
    with running(upstream) as base, running(create_app(config)) as proxy:
        OpenAI(base_url=proxy + "/v1", api_key="x").chat.completions.create(...)
    with serve_cli(tmp_path / "serve.log", "--library", LIB, "--upstream", base + "/v1", workers=2) as url:
        events(tmp_path / "serve.log", "access")            # the JSON log lines of one event

The reply text comes from `responder(messages, k)`, k counting identical requests (sample k of a group).
Written as a bare ASGI callable so the benchmark's fixed latency is the upstream's only cost.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from tests.helpers.servers import free_port


@dataclass
class Fault:
    status: int = 500
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    break_stream: bool = False  # start a 200 SSE stream, send one event, then drop the connection
    body: bytes | None = None  # sent as it is with `status` instead of an error object (e.g. truncated JSON)
    chunked: bool = False  # `body` sent in 64 KiB pieces without a content-length
    endless_stream: bool = False  # a 200 SSE stream of content events that never ends (until the reader leaves)
    event_delay_s: float = 0.0  # between two events of an endless stream
    location: str | None = None  # a redirect: `status` (say 307) with this Location header


class ScriptedUpstream:
    def __init__(
        self,
        *,
        latency_s: float = 0.0,
        responder: Callable[[list[dict[str, Any]], int], str] | None = None,
        record: bool = True,
        ignores_stream: bool = False,
        reply_headers: dict[str, str] | None = None,
    ):
        self.latency_s = latency_s
        self.ignores_stream = ignores_stream  # answer JSON even to `stream: true`, as some servers do
        self.reply_headers = reply_headers or {}  # sent with every whole (JSON) reply, e.g. a set-cookie
        self.responder = responder or (lambda messages, k: "scripted reply")
        self.script: deque[Fault] = deque()
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.record = record
        self._seen: Counter[str] = Counter()
        self._lock = threading.Lock()

    def push(self, *faults: Fault) -> None:
        with self._lock:
            self.script.extend(faults)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                kind = "startup" if message["type"] == "lifespan.startup" else "shutdown"
                await send({"type": f"lifespan.{kind}.complete"})
                if kind == "shutdown":
                    return
        if scope["path"].endswith("/models"):
            await _send_json(
                send, 200, {"object": "list", "data": [{"id": "scripted", "object": "model", "owned_by": "tests"}]}
            )
            return
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        body = json.loads(raw)
        with self._lock:
            if self.record:
                self.bodies.append(body)
                self.headers.append({k.decode(): v.decode() for k, v in scope["headers"]})
            fault = self.script.popleft() if self.script else None
            key = json.dumps(body.get("messages"), sort_keys=True)
            n = body.get("n") or 1
            k = self._seen[key]
            self._seen[key] += n
        if fault is not None and fault.break_stream:
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]}
            )
            await send(
                {
                    "type": "http.response.body",
                    "body": b'data: {"choices": [{"index": 0, "delta": {"content": "par"}}]}\n\n',
                    "more_body": True,
                }
            )
            raise ConnectionAbortedError("scripted: upstream dies mid-stream")  # uvicorn closes the connection
        if fault is not None and fault.endless_stream:
            await _send_endless(receive, send, fault.event_delay_s)
            return
        if fault is not None and fault.location is not None:
            await _send_raw(send, fault.status, b"", {"location": fault.location})
            return
        if fault is not None and fault.body is not None:
            await asyncio.sleep(fault.delay_s)
            await (_send_chunked if fault.chunked else _send_raw)(send, fault.status, fault.body)
            return
        if fault is not None:
            await asyncio.sleep(fault.delay_s)
            await _send_json(
                send,
                fault.status,
                {"error": {"message": f"scripted {fault.status}", "type": "scripted"}},
                fault.headers,
            )
            return
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        texts = [self.responder(body["messages"], k + i) for i in range(n)]
        if body.get("stream") and not self.ignores_stream:
            await _send_stream(send, body, texts)
        else:
            words = sum(len(text.split()) for text in texts)
            usage = {"prompt_tokens": 11, "completion_tokens": words, "total_tokens": 11 + words}
            choices = [
                {"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                for i, text in enumerate(texts)
            ]
            await _send_json(
                send,
                200,
                {
                    "id": "chatcmpl-up",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body.get("model", "scripted"),
                    "choices": choices,
                    "usage": usage,
                },
                self.reply_headers,
            )


async def _send_json(send: Any, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
    data = json.dumps(payload).encode()
    extra = [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()), *extra],
        }
    )
    await send({"type": "http.response.body", "body": data})


async def _send_raw(send: Any, status: int, data: bytes, extra: dict[str, str] | None = None) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    headers += [(key.encode(), value.encode()) for key, value in (extra or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


async def _send_chunked(send: Any, status: int, data: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
    for start in range(0, len(data), 65536):
        await send({"type": "http.response.body", "body": data[start : start + 65536], "more_body": True})
    await send({"type": "http.response.body", "body": b""})


#: one content event of an endless stream (about 1 KiB)
ENDLESS_EVENT = (
    "data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": "x" * 1000}}]}) + "\n\n"
).encode()


async def _send_endless(receive: Any, send: Any, delay_s: float) -> None:
    """Events until the reader hangs up (uvicorn's `send` does not fail once it has: `receive` says so)."""
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    gone = asyncio.ensure_future(receive())
    try:
        while not gone.done():
            await send({"type": "http.response.body", "body": ENDLESS_EVENT * 16, "more_body": True})
            await asyncio.sleep(delay_s)
    finally:
        gone.cancel()


async def _send_stream(send: Any, body: dict[str, Any], texts: list[str]) -> None:
    """Each choice in three events (role, first half, second half), choices interleaved as servers do."""
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    base = {
        "id": "chatcmpl-up",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": body.get("model", "scripted"),
    }
    for part in range(3):
        for index, text in enumerate(texts):
            half = len(text) // 2
            delta = [{"role": "assistant", "content": ""}, {"content": text[:half]}, {"content": text[half:]}][part]
            chunk = base | {"choices": [{"index": index, "delta": delta, "finish_reason": None}]}
            await send(
                {"type": "http.response.body", "body": f"data: {json.dumps(chunk)}\n\n".encode(), "more_body": True}
            )
    finals = [{"index": index, "delta": {}, "finish_reason": "stop"} for index in range(len(texts))]
    tail = "".join(f"data: {json.dumps(base | {'choices': [final]})}\n\n" for final in finals)
    if (body.get("stream_options") or {}).get("include_usage"):
        words = sum(len(text.split()) for text in texts)
        usage = base | {
            "choices": [],
            "usage": {"prompt_tokens": 11, "completion_tokens": words, "total_tokens": 11 + words},
        }
        tail += f"data: {json.dumps(usage)}\n\n"
    await send({"type": "http.response.body", "body": (tail + "data: [DONE]\n\n").encode(), "more_body": False})


@contextlib.contextmanager
def running(app: Any, *, timeout_s: float = 30.0) -> Iterator[str]:
    """Serve `app` with uvicorn on 127.0.0.1 (a free port) in a thread; yield `http://127.0.0.1:PORT`."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("test server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=timeout_s)


@contextlib.contextmanager
def serve_cli(
    log: Path, *args: str, workers: int = 1, timeout_s: float = 120.0, stop: signal.Signals = signal.SIGINT
) -> Iterator[str]:
    """`python -m tfgrpo serve ARGS --port FREE --workers N`, its stderr in `log`; yield its base URL once
    every worker has started; stop it with `stop` (SIGINT, SIGTERM: graceful, traces written) afterwards."""
    port = free_port()
    command = [sys.executable, "-m", "tfgrpo", "serve", *args, "--port", str(port), "--workers", str(workers)]
    with open(log, "w") as stderr:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        deadline = time.monotonic() + timeout_s
        while len(events(log, "worker_started")) < workers:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"tfgrpo serve did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.1)
        base = f"http://127.0.0.1:{port}"
        httpx.get(base + "/health", timeout=30).raise_for_status()
        yield base
    finally:
        process.send_signal(stop)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def events(log: Path, event: str) -> list[dict[str, Any]]:
    """The JSON lines of `log` whose "event" is `event`, in order (other lines skipped)."""
    found = []
    for line in log.read_text().splitlines():
        if not line.startswith("{"):
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("event") == event:
            found.append(entry)
    return found
