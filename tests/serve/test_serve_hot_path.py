"""The proxy's own fast paths: the chat route outside FastAPI's middleware, and the bare SSE passthrough."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx

from tests.helpers.serve_fixtures import proxy

QUESTION = [{"role": "user", "content": "Count slowly."}]


class SlowStreamUpstream:
    """Streams one event every 0.1 s for 10 s: long enough to tell a stopped copy from a finished one."""

    def __init__(self) -> None:
        self.events_sent = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        while (await receive()).get("more_body"):
            pass
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]}
        )
        for position in range(100):
            chunk = {"choices": [{"index": 0, "delta": {"content": f"{position} "}}]}
            await send(
                {"type": "http.response.body", "body": f"data: {json.dumps(chunk)}\n\n".encode(), "more_body": True}
            )
            self.events_sent += 1
            await asyncio.sleep(0.1)
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})


def test_client_hanging_up_mid_stream_stops_the_copy_and_traces_what_it_was_sent(tmp_path):
    upstream = SlowStreamUpstream()
    with proxy(tmp_path, upstream) as p:  # type: ignore[arg-type]
        with httpx.stream(
            "POST", p.url + "/v1/chat/completions", json={"model": "m", "messages": QUESTION, "stream": True}
        ) as response:
            assert response.status_code == 200 and response.headers["x-tfgrpo-arm"] == "B"
            first = next(response.iter_lines())
            assert first.startswith("data: ") and "0 " in first
        hung_up = time.monotonic()
        rows = p.traces(1, timeout_s=3.0)  # the whole stream would take 10 s
        assert time.monotonic() - hung_up < 3.0
        row = rows[0]
        assert row["stream"] and row["status"] == 200 and row["reply"].startswith("0 ")
        assert len(row["reply"].split()) < 30  # only what went out before the hang-up, not the 100 events


def test_chat_route_answers_other_methods_and_crashes_with_one_line(tmp_path, monkeypatch):
    with proxy(tmp_path) as p:
        wrong = httpx.get(p.url + "/v1/chat/completions")
        assert wrong.status_code == 405 and "takes POST" in wrong.json()["error"]["message"]

        def broken(*_args: Any, **_kwargs: Any) -> None:
            raise RuntimeError("boom\nsecond line")

        monkeypatch.setattr("tfgrpo.serve.chat.prepare", broken)
        crashed = httpx.post(p.url + "/v1/chat/completions", json={"model": "m", "messages": QUESTION})
        assert crashed.status_code == 500
        assert crashed.json()["error"]["message"] == "internal error: RuntimeError: boom"
        assert httpx.get(p.url + "/health").json()["status"] == "ok"  # still serving


def test_a_request_body_over_the_limit_gets_413_and_the_server_keeps_serving(tmp_path):
    with proxy(tmp_path, max_request_bytes=4096) as p:
        huge = {"model": "m", "messages": [{"role": "user", "content": "x" * 100_000}]}
        refused = httpx.post(p.url + "/v1/chat/completions", json=huge)
        assert refused.status_code == 413 and "max_request_bytes" in refused.json()["error"]["message"]
        assert not p.upstream.bodies  # nothing reached the upstream
        fine = httpx.post(p.url + "/v1/chat/completions", json={"model": "m", "messages": QUESTION})
        assert fine.status_code == 200
