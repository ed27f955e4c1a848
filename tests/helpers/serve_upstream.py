"""Test servers for `tfgrpo serve`: a scripted OpenAI-compatible upstream, and a way to run any ASGI app.

    upstream = ScriptedUpstream(latency_s=0.0)         # raw ASGI: chat completions (JSON and SSE), /v1/models
    upstream.push(Fault(status=429, headers={"retry-after": "0"}))
    with running(upstream) as base, running(create_app(config)) as proxy:
        OpenAI(base_url=proxy + "/v1", api_key="x").chat.completions.create(...)

The reply text comes from `responder(messages, k)`, k counting identical requests (sample k of a group).
Written as a bare ASGI callable so the benchmark's fixed latency is the upstream's only cost.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn


@dataclass
class Fault:
    status: int = 500
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    break_stream: bool = False  # start a 200 SSE stream, send one event, then drop the connection


class ScriptedUpstream:
    def __init__(
        self,
        *,
        latency_s: float = 0.0,
        responder: Callable[[list[dict[str, Any]], int], str] | None = None,
        record: bool = True,
    ):
        self.latency_s = latency_s
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
            k = self._seen[key]
            self._seen[key] += 1
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
        text = self.responder(body["messages"], k)
        if body.get("stream"):
            await _send_stream(send, body, text)
        else:
            usage = {
                "prompt_tokens": 11,
                "completion_tokens": len(text.split()),
                "total_tokens": 11 + len(text.split()),
            }
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            await _send_json(
                send,
                200,
                {
                    "id": "chatcmpl-up",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body.get("model", "scripted"),
                    "choices": [choice],
                    "usage": usage,
                },
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


async def _send_stream(send: Any, body: dict[str, Any], text: str) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    base = {
        "id": "chatcmpl-up",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": body.get("model", "scripted"),
    }
    half = len(text) // 2
    deltas = [{"role": "assistant", "content": ""}, {"content": text[:half]}, {"content": text[half:]}]
    for delta in deltas:
        chunk = base | {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        await send(
            {"type": "http.response.body", "body": f"data: {json.dumps(chunk)}\n\n".encode(), "more_body": True}
        )
    final = base | {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    tail = f"data: {json.dumps(final)}\n\n"
    if (body.get("stream_options") or {}).get("include_usage"):
        usage = base | {
            "choices": [],
            "usage": {
                "prompt_tokens": 11,
                "completion_tokens": len(text.split()),
                "total_tokens": 11 + len(text.split()),
            },
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
