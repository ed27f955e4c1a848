"""Can this worker serve? `/ready` answers 200 or 503, and `/health` says `ok` or `degraded` from the same check.

Ready means: at least one upstream answers (`GET /models` with any status below 500: a 401 or 404 still
proves the server is there) and the trace store answers `SELECT 1`, each within `ready_timeout_s`. An
`llm:` upstream runs through the client layer and is not probed. The result is kept for one second, so a
probe storm costs the upstream one request a second. Details name upstreams by position, never by URL.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tfgrpo.serve.llm_upstream import LLMUpstream
from tfgrpo.serve.traces import TraceStore
from tfgrpo.serve.upstream import Upstream

CACHE_S = 1.0


class Readiness:
    def __init__(self, upstream: Upstream | LLMUpstream, traces: TraceStore, *, timeout_s: float):
        self.upstream = upstream
        self.traces = traces
        self.timeout_s = timeout_s
        self._lock = asyncio.Lock()
        self._checked_at = float("-inf")
        self._result: dict[str, Any] = {}

    async def check(self) -> dict[str, Any]:
        """`{"ready", "upstream": {"ok", "replicas": [{"ok", "detail"}]}, "trace_store": {"ok", "detail", ...}}`."""
        async with self._lock:  # concurrent probes wait for one check instead of each sending their own
            if time.monotonic() - self._checked_at >= CACHE_S:
                upstream, store = await asyncio.gather(self._upstream(), self._store())
                self._result = {"ready": upstream["ok"] and store["ok"], "upstream": upstream, "trace_store": store}
                self._checked_at = time.monotonic()
            return self._result

    async def _upstream(self) -> dict[str, Any]:
        if isinstance(self.upstream, LLMUpstream):
            return {"ok": True, "replicas": [{"ok": True, "detail": "not probed (an llm: upstream)"}]}
        replicas = [{"ok": ok, "detail": detail} for ok, detail in await self.upstream.probe(self.timeout_s)]
        return {"ok": any(replica["ok"] for replica in replicas), "replicas": replicas}

    async def _store(self) -> dict[str, Any]:
        counts = {"pending": self.traces.pending, "write_errors": self.traces.write_errors}
        try:
            await asyncio.wait_for(asyncio.to_thread(self.traces.ping), self.timeout_s)
        except asyncio.TimeoutError:
            return {"ok": False, "detail": f"no answer within {self.timeout_s:g}s"} | counts
        except Exception as exc:  # noqa: BLE001 - whatever the driver raises, the store is not usable
            return {"ok": False, "detail": f"unreachable: {type(exc).__name__}"} | counts
        return {"ok": True, "detail": "answers"} | counts
