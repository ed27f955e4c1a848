"""Servers for backend tests: llama.cpp's OpenAI-compatible server on SmolLM2, and a scripted fault server.

with llama_server() as base_url:            # python -m llama_cpp.server on the embedded GGUF
    backend = OpenAIBackend("smollm2", base_url=base_url)

with FaultServer() as server:               # http.server in a thread, speaking /v1/chat/completions
    server.push(Reply(status=429, headers={"Retry-After": "7"}), Reply())
    backend = OpenAIBackend("fake", base_url=server.base_url)
"""

from __future__ import annotations

import contextlib
import http.server
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def llama_server(
    model_path: str | Path | None = None, *, n_ctx: int = 2048, ready_timeout_s: float = 120.0
) -> Iterator[str]:
    """Start `python -m llama_cpp.server` on 127.0.0.1 (default model: the embedded SmolLM2 GGUF);
    yield its base URL (`http://127.0.0.1:PORT/v1`) once `/v1/models` answers; stop it afterwards."""
    if model_path is None:
        from tfgrpo.llm.embedded import embedded_gguf_path

        model_path = embedded_gguf_path()
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model_path),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(n_ctx),
        "--n_threads",
        "1",
        "--verbose",
        "False",
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_until_ready(process, f"{base_url}/models", ready_timeout_s)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def _wait_until_ready(process: subprocess.Popen[bytes], url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            output = process.stdout.read().decode(errors="replace") if process.stdout else ""
            raise RuntimeError(f"llama_cpp.server exited with {process.returncode}:\n{output[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"llama_cpp.server did not answer {url} within {timeout_s:.0f} s")


@dataclass
class Reply:
    """One scripted answer. Default: a valid completion with `n` choices (or one, if `ignore_n`)."""

    status: int = 200
    body: Any = None  # dict → JSON; str/bytes → sent raw (malformed bodies); None → a valid completion
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    ignore_n: bool = False
    text: str = "scripted reply"


@dataclass
class RecordedRequest:
    path: str
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


class FaultServer:
    """An OpenAI-compatible `/v1/chat/completions` in a background thread, answering from a script.

    Replies are consumed in order; when the script is empty it answers `default` (a valid completion
    unless changed). `ignore_n = True` on the server makes every default reply carry one choice.
    """

    def __init__(self) -> None:
        self.script: deque[Reply] = deque()
        self.default = Reply()
        self.requests: list[RecordedRequest] = []
        #: optional `respond(body) -> Reply | None`, asked before the script (a server that checks requests)
        self.responder: Any = None
        self._lock = threading.Lock()
        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="fault-server", daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def push(self, *replies: Reply) -> None:
        with self._lock:
            self.script.extend(replies)

    def __enter__(self) -> FaultServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def _next_reply(self, path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> Reply:
        with self._lock:
            self.requests.append(RecordedRequest(path=path, body=body, headers=dict(headers or {})))
            decided = self.responder(body) if self.responder is not None else None
            if decided is not None:
                return decided
            return self.script.popleft() if self.script else self.default

    def _handler_class(self) -> type[http.server.BaseHTTPRequestHandler]:
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet test output
                return

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length) if length else b"{}"
                try:
                    body = json.loads(raw)
                except json.JSONDecodeError:
                    body = {"_raw": raw.decode(errors="replace")}
                reply = server._next_reply(self.path, body, {k.lower(): v for k, v in self.headers.items()})
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                payload = _payload(reply, body)
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout tests)

        return Handler


def _payload(reply: Reply, request: dict[str, Any]) -> bytes:
    if isinstance(reply.body, bytes):
        return reply.body
    if isinstance(reply.body, str):
        return reply.body.encode()
    if reply.body is not None:
        return json.dumps(reply.body).encode()
    if reply.status >= 400:
        return json.dumps({"error": {"message": f"scripted error {reply.status}", "type": "scripted"}}).encode()
    return json.dumps(completion_body(request, text=reply.text, ignore_n=reply.ignore_n)).encode()


def completion_body(
    request: dict[str, Any], *, text: str = "scripted reply", ignore_n: bool = False
) -> dict[str, Any]:
    """A valid chat.completion body answering `request` (n choices unless `ignore_n`)."""
    n = 1 if ignore_n else int(request.get("n") or 1)
    seed = request.get("seed")
    choices = [
        {
            "index": i,
            "message": {"role": "assistant", "content": f"{text} {i}" + (f" seed={seed}" if seed is not None else "")},
            "finish_reason": "stop",
        }
        for i in range(n)
    ]
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": request.get("model", "fake"),
        "choices": choices,
        "usage": {"prompt_tokens": 10, "completion_tokens": 3 * n, "total_tokens": 10 + 3 * n},
    }


__all__ = ["FaultServer", "RecordedRequest", "Reply", "completion_body", "free_port", "llama_server"]


def ask(question: str = "What is the capital of France?", **fields):
    """A one-message ChatRequest, for backend tests."""
    from tfgrpo.llm.types import ChatRequest, Message

    return ChatRequest(messages=[Message(role="user", content=question)], **fields)
