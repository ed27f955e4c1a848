"""Shared pieces of the `tfgrpo serve` tests: a library file and a proxy in front of a scripted upstream."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiences import Experience, Library
from tests.helpers.serve_upstream import ScriptedUpstream, running
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
