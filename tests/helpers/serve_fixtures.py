"""Shared pieces of the `tfgrpo serve` tests: a library file and a proxy in front of a scripted upstream."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.helpers.serve_upstream import ScriptedUpstream, running
from tfgrpo.experiences import Experience, Library
from tfgrpo.serve.app import create_app
from tfgrpo.serve.config import ServeConfig

LESSONS = {
    "G0": "Check the units before answering.",
    "G1": "For geometry, draw the figure first.",
    "G2": "When adding numbers, check the carry.",
}


def write_library(path: Path, lessons: dict[str, str] | None = None, *, version: int = 3) -> Path:
    lessons = LESSONS if lessons is None else lessons
    library = Library(version=version, experiences=[Experience(id=i, text=t) for i, t in lessons.items()])
    library.save(path)
    return path


@dataclass
class Proxy:
    url: str  # http://127.0.0.1:PORT (the OpenAI base URL is url + "/v1")
    upstream: ScriptedUpstream
    app: Any

    @property
    def state(self) -> Any:
        return self.app.state.serve

    def traces(self, count: int, timeout_s: float = 10.0) -> list[dict[str, Any]]:
        """The stored exchanges once there are `count` (a stream is traced just after its last byte went out)."""
        deadline = time.monotonic() + timeout_s
        while len(rows := self.state.traces.exchanges()) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(rows)} exchanges traced, {count} expected")
            time.sleep(0.02)
        return rows


@contextlib.contextmanager
def proxy(tmp_path: Path, upstream: ScriptedUpstream | None = None, **settings: Any) -> Iterator[Proxy]:
    upstream = upstream or ScriptedUpstream()
    library = settings.pop("library", None) or write_library(tmp_path / "library.json")
    with running(upstream) as upstream_url:
        settings.setdefault("traces", str(tmp_path / "traces.sqlite"))
        config = ServeConfig(library=library, upstream=[upstream_url + "/v1"], backoff_s=0.0, **settings)
        app = create_app(config)
        with running(app) as url:
            yield Proxy(url=url, upstream=upstream, app=app)


def announce_a_body_and_stall(url: str, path: str, headers: dict[str, str] | None = None) -> tuple[bytes, float]:
    """POST to `path` announcing a 100-byte body, send 10 bytes, then nothing: (all the server answered, seconds
    until it closed the connection or 10 s passed)."""
    host, port = url.removeprefix("http://").split(":")
    extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
    with socket.create_connection((host, int(port))) as connection:
        connection.sendall(
            f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n{extra}\r\n".encode()
            + b'{"model": '  # 10 of the 100 bytes announced, then nothing
        )
        connection.settimeout(10)
        started = time.monotonic()
        answer = b""
        while True:
            try:
                chunk = connection.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            answer += chunk
        return answer, time.monotonic() - started
