"""What serve tells its operator: one access-log line per request, an event line for every failure or
reload, and the Prometheus metrics (`metrics.py`) they feed.

Every line is one JSON object on the `tfgrpo.serve` logger (stderr once `configure_logging` ran):
`{"ts", "event", "pid", ...}`. Events: `access` (logger `tfgrpo.serve.access`, one per request),
`library_reloaded`, `library_reload_failed`, `trace_dropped`, `upstream_failed`, `internal_error`,
`worker_started`, `worker_stopped`. No line carries a header, a key, a message or a reply: the access log
names a client by its key's hash (`auth.py`) and a request by its exchange id; error texts are cut to their
first line with URLs and upstream addresses removed (`errors.redact`).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from tfgrpo.serve.errors import redact
from tfgrpo.serve.exchange import Exchange
from tfgrpo.serve.metrics import ServeMetrics

LOGGER = logging.getLogger("tfgrpo.serve")
ACCESS = logging.getLogger("tfgrpo.serve.access")
ROUTES = {
    "/v1/chat/completions": "chat",
    "/v1/feedback": "feedback",
    "/v1/models": "models",
    "/health": "health",
    "/ready": "ready",
    "/metrics": "metrics",
    "/": "page",
}
NO_ARM = "-"


class _CurrentStderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever `sys.stderr` is when a line is written: a handler bound to the stream of the moment
    would write into a closed one once that stream is swapped back (an in-process run under a capture)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr  # emit runs under the handler's lock
        super().emit(record)


def configure_logging() -> None:
    """Send serve's lines to stderr, one JSON object each (called once per serving process)."""
    handler = _CurrentStderr()
    handler.setFormatter(logging.Formatter("%(message)s"))
    LOGGER.handlers[:] = [handler]
    LOGGER.setLevel(logging.INFO)
    LOGGER.propagate = False


def log_event(event: str, level: int = logging.INFO, **fields: Any) -> None:
    if LOGGER.isEnabledFor(level):
        LOGGER.log(level, _line(event, fields))


def _line(event: str, fields: dict[str, Any]) -> str:
    now = time.time()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"
    return json.dumps({"ts": stamp, "event": event, "pid": os.getpid(), **fields}, ensure_ascii=False, default=str)


def first_line(exc: BaseException, hidden: list[str]) -> str:
    """`Type: first line of the message`, URLs and `hidden` strings removed: what a log line says of an error."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {redact(text, hidden)}"[:300]


@dataclass
class RequestRecord:
    """What the access log and the metrics say of one request, filled in as it is served."""

    method: str
    path: str
    started: float = field(default_factory=time.perf_counter)
    status: int = 0  # the status sent (a cut stream: the one it is traced with); 0: the client left before any
    exchange: Exchange | None = None  # a chat request that got as far as an arm
    attempts: int | None = None  # upstream attempts (None: not sent upstream, or not known)
    error: str | None = None  # the error code answered (or met mid-stream)
    client: str | None = None  # the client key's hash, shortened, when client keys are on
    cut: bool = False  # a stream ended early after its 200 head: `status` is then the one it is traced with
    identity: str | None = None  # the client key's whole sha256 (hex): owns the exchange; never logged


class Observer:
    """The one place that logs and counts: the app, the upstream, the trace store and the library call it."""

    def __init__(self, metrics: ServeMetrics, *, access_log: bool, hidden: list[str]):
        self.metrics = metrics
        self.access_log = access_log
        self.hidden = hidden

    def request(self, record: RequestRecord) -> None:
        seconds = time.perf_counter() - record.started
        exchange = record.exchange
        route = ROUTES.get(record.path, "other")
        self.metrics.observe(route, exchange.arm if exchange else NO_ARM, record.status, seconds)
        if not self.access_log or not ACCESS.isEnabledFor(logging.INFO):
            return
        fields: dict[str, Any] = {
            "method": record.method,
            "path": record.path[:200],
            "status": record.status,
            "ms": round(seconds * 1000.0, 2),
        }
        if exchange is not None:
            fields |= {
                "exchange": exchange.id,
                "arm": exchange.arm,
                "treated": bool(exchange.injected_ids),
                "library_version": exchange.library_version,
                "library_hash": exchange.library_hash[:12],
                "stream": exchange.stream,
                "attempts": record.attempts,
            }
        if record.error is not None:
            fields["error"] = record.error
        if record.cut:
            fields["cut"] = True
        if record.client is not None:
            fields["client"] = record.client
        ACCESS.info(_line("access", fields))

    # ------------------------------------------------------------------ events
    def reloaded(self, version: int, content_hash: str, experiences: int) -> None:
        log_event("library_reloaded", version=version, hash=content_hash[:12], experiences=experiences)
        self.metrics.reloads.inc()
        self.metrics.serving(version, content_hash)

    def serving(self, version: int, content_hash: str) -> None:
        self.metrics.serving(version, content_hash)

    def reload_failed(self, message: str) -> None:
        self.metrics.reload_errors.inc()
        log_event("library_reload_failed", logging.WARNING, error=redact(message, self.hidden)[:300])

    def trace_dropped(self, row: dict[str, Any], exc: BaseException) -> None:
        """Called from the trace writer's thread for a row the store refused."""
        self.metrics.trace_write_errors.inc()
        log_event("trace_dropped", logging.WARNING, exchange=row.get("id"), error=first_line(exc, self.hidden))

    def upstream_retry(self, cause: str) -> None:
        self.metrics.upstream_retries.labels(cause).inc()

    def upstream_failed(self, code: str, status: int, attempts: int, exchange: str | None = None) -> None:
        self.metrics.upstream_errors.labels(code).inc()
        log_event("upstream_failed", logging.WARNING, exchange=exchange, status=status, error=code, attempts=attempts)

    def internal_error(self, exc: BaseException, path: str) -> None:
        """An unexpected exception: its traceback goes to the log (never to the client)."""
        trace = redact("".join(traceback.format_exception(exc)), self.hidden)
        log_event(
            "internal_error", logging.ERROR, path=path[:200], error=first_line(exc, self.hidden), traceback=trace
        )
