"""A scripted world for `tfgrpo learn` tests: replies that make the algorithm observable.

Problems are "What is A+B?". The reply depends only on the request's content and sample index, so the
same world answers through the ScriptedBackend (`respond(request, index)`) and through an HTTP server
(`reply_for(messages, index)`), and every run is deterministic.

- rollouts: `kind` of the problem decides: "mixed" (even samples right, odd wrong), "right" (all right:
  a homogeneous group), "flaky" (sample 3's call fails), "down" (all but sample 0 fail);
- summaries: a fixed text naming the problem;
- group analysis: one `add` naming the problem (or malformed replies, per `group_mode`);
- consolidation: every proposed operation, unchanged (a faithful consolidator).
"""

from __future__ import annotations

import http.server
import json
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfgrpo.llm.errors import ServerError

PROBLEM = re.compile(r"What is (\d+)\+(\d+)\?")


class SimulatedCrash(RuntimeError):
    """Raised by the world at a chosen call to simulate the process dying mid-run."""


@dataclass
class World:
    kinds: dict[str, str] = field(default_factory=dict)  # "A+B" -> kind; default "mixed"
    group_mode: str = "valid"  # valid | malformed_once | malformed_always
    lesson: str | None = None  # group analysis lesson template ({a}, {b}, {sum}); None = a carry lesson
    crash_at: int | None = None  # raise SimulatedCrash at this answered-call count
    interrupt_at: int | None = None  # raise KeyboardInterrupt at this answered-call count
    answered: list[str] = field(default_factory=list)  # cache keys of every sample answered
    requests: list[Any] = field(default_factory=list)

    def respond(self, request: Any, index: int) -> Any:
        """ScriptedBackend responder."""
        self.requests.append(request)
        if self.crash_at is not None and len(self.answered) >= self.crash_at:
            return SimulatedCrash(f"simulated crash at call {len(self.answered)}")
        if self.interrupt_at is not None and len(self.answered) >= self.interrupt_at:
            return KeyboardInterrupt()
        reply = self.reply_for([m.model_dump() for m in request.messages], index)
        if not isinstance(reply, BaseException):
            self.answered.append(request.sample_key("scripted", index))
        return reply

    def reply_for(self, messages: list[dict[str, Any]], index: int) -> Any:
        first, text = messages[0]["content"], messages[-1]["content"]
        if "<proposed_changes>" in first:
            ops = re.findall(r"^\s+- (\{.*\})$", first, re.M)
            return "Plan: keep all.\n```json\n[" + ", ".join(ops) + "]\n```"
        if "<attempt " in first:
            return self.group_reply(messages)
        if "<trajectory>" in first:
            match = PROBLEM.search(text)
            return f"1. The assistant added {match[1]} and {match[2]}."
        match = PROBLEM.search(text)
        if match is None:
            raise AssertionError(f"unexpected request: {text[:200]}")
        a, b = int(match[1]), int(match[2])
        kind = self.kinds.get(f"{a}+{b}", "mixed")
        if kind == "flaky" and index % 4 == 3 or kind == "down" and index % 4 != 0:
            return ServerError("scripted outage", status=503)
        right = kind == "right" or index % 2 == 0
        return f"Adding gives \\boxed{{{a + b if right else a + b + 1}}}"

    def group_reply(self, messages: list[dict[str, Any]]) -> str:
        match = PROBLEM.search(messages[0]["content"])
        a, b = int(match[1]), int(match[2])
        text = self.lesson.format(a=a, b=b, sum=a + b) if self.lesson else f"When adding {a} and {b}, check the carry."
        valid = "```json\n" + json.dumps([{"option": "add", "experience": text}]) + "\n```"
        is_retry = len(messages) > 1
        if self.group_mode == "malformed_always" or (self.group_mode == "malformed_once" and not is_retry):
            return "I would add a lesson about carries, but I will not write JSON."
        return valid


def write_problems(
    path: Path, pairs: list[tuple[int, int]], *, answers: dict[tuple[int, int], str] | None = None
) -> Path:
    rows = [
        {"id": f"q{a}_{b}", "problem": f"What is {a}+{b}?", "answer": (answers or {}).get((a, b), str(a + b))}
        for a, b in pairs
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


class WorldServer:
    """`POST /v1/chat/completions` answered by `World.reply_for`; the k-th identical request is sample k."""

    def __init__(self, world: World, *, delay_s: float = 0.0):
        self.world = world
        self.delay_s = delay_s
        self.seen: Counter[str] = Counter()
        self.bodies: list[dict] = []
        self._lock = threading.Lock()
        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> WorldServer:
        self._thread.start()
        return self

    def learn_args(
        self, data: Path, out: Path, *options: str, model: str = "world-model", api_key: str = "k"
    ) -> list[str]:
        """`tfgrpo learn` arguments that learn from `data` into `out` through the openai backend on this server."""
        return [
            *("learn", "--data", str(data), "--out", str(out)),
            *("--backend", "openai", "--model", model, "--base-url", self.base_url, "--api-key", api_key),
            *options,
        ]

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def answer(self, body: dict) -> tuple[int, dict]:
        key = json.dumps(body["messages"], sort_keys=True)
        with self._lock:
            self.bodies.append(body)
            index = self.seen[key]
            self.seen[key] += 1
        reply = self.world.reply_for(body["messages"], index)
        if self.delay_s:
            time.sleep(self.delay_s)
        if isinstance(reply, BaseException):
            return 503, {"error": {"message": str(reply), "type": "server_error"}}
        words = sum(len(str(m.get("content") or "").split()) for m in body["messages"])
        return 200, {
            "id": "chatcmpl-world",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "world"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
            "usage": {
                "prompt_tokens": words,
                "completion_tokens": len(reply.split()),
                "total_tokens": words + len(reply.split()),
            },
        }

    def _handler(self):
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                return

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                status, payload = server.answer(body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
