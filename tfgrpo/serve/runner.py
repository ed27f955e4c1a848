"""Running `tfgrpo serve`: check everything that can fail at start, bind the port, then serve in this process
or in N worker processes.

Start-up errors are one line each (`ServeStartupError` and the other `ConfigError`s, printed by the CLI):
an unreadable library or key file, a trace store that cannot be opened, a port that cannot be bound. The
"serving ..." line is announced only once the port is bound.

Several workers (`workers` > 1) run under uvicorn's own supervisor (`uvicorn.supervisors.Multiprocess`,
what `uvicorn --workers N` runs): the port is bound once here and shared; each worker is a fresh (spawned)
process that builds its own app from the settings, so each has its own upstream connections, trace writer
and library watcher. The supervisor replaces a worker that dies, restarts them one by one on SIGHUP,
adds or removes one on SIGTTIN / SIGTTOU, and stops them gracefully on SIGINT / SIGTERM. Before any
worker starts, the settings are tried here once (library, keys, trace store: its tables are created here,
not raced by N workers), and a worker that still fails to start exits with uvicorn's start-up-failure
code, which stops the supervisor instead of restarting it forever.
"""

from __future__ import annotations

import errno
import functools
import inspect
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors import Multiprocess

from tfgrpo.core.secrets import mask_url
from tfgrpo.serve.app import ServeApp, create_app
from tfgrpo.serve.config import ServeConfig
from tfgrpo.serve.errors import ServeStartupError
from tfgrpo.serve.http_protocol import BoundedHeadConfig
from tfgrpo.serve.live_library import Snapshot
from tfgrpo.serve.metrics import MULTIPROCESS_ENV, claim_multiprocess_dir
from tfgrpo.serve.observe import configure_logging
from tfgrpo.serve.state import ServeState

BIND_ERRORS = {
    errno.EADDRINUSE: "the port is in use (another server, or one still stopping)",
    errno.EACCES: "permission denied (ports below 1024 need privileges)",
    errno.EADDRNOTAVAIL: "no such address on this machine",
}


def serve(settings: ServeConfig, *, announce: Callable[[str], None]) -> None:
    """Serve until SIGINT / SIGTERM; `announce` gets the one "serving ..." line once the port is bound."""
    configure_logging()
    if settings.workers == 1:
        app = create_app(settings)
        try:
            sock = bind(settings.host, settings.port)
        except ServeStartupError:
            app.state.serve.close()
            raise
        announce(_serving_line(settings, app.state.serve.live.current, sock))
        try:
            uvicorn.Server(_uvicorn_config(app, settings)).run(sockets=[sock])
        except KeyboardInterrupt:  # uvicorn raises the SIGINT it handled again once it stopped gracefully
            pass
        finally:
            sock.close()
        return
    _serve_workers(settings, announce)


def _serve_workers(settings: ServeConfig, announce: Callable[[str], None]) -> None:
    # every start-up error here, once, as one line; each worker embeds the library for its own top-k index
    probe = ServeState.build(settings, topk_index=False)
    snapshot = probe.live.current
    probe.close()
    metrics_dir, temporary = _metrics_dir(settings.metrics_dir)
    # prometheus_client reads it when a worker imports it: set here, inherited by every spawned worker
    os.environ[MULTIPROCESS_ENV] = str(metrics_dir)
    try:
        sock = bind(settings.host, settings.port)
        announce(_serving_line(settings, snapshot, sock))
        app = functools.partial(worker_app, settings, metrics_dir)
        supervisor = _supervisor(_uvicorn_config(app, settings, factory=True), sock)
        try:
            supervisor.run()
        finally:
            sock.close()
        if any(process.exitcode == STARTUP_FAILURE for process in supervisor.processes):
            raise ServeStartupError("a worker could not start (its error is above); serving stopped")
    finally:
        if temporary:
            shutil.rmtree(metrics_dir, ignore_errors=True)


def worker_app(settings: ServeConfig, metrics_dir: Path) -> ServeApp:
    """The app of one worker process (uvicorn calls it in the worker, as an app factory)."""
    configure_logging()
    try:
        return create_app(settings, metrics_dir=metrics_dir)
    except Exception as exc:  # noqa: BLE001 - a worker that cannot start says why in one line and stops the supervisor
        print(f"error: worker {os.getpid()} cannot start: {exc}".splitlines()[0], file=sys.stderr, flush=True)
        sys.exit(STARTUP_FAILURE)


def _supervisor(config: uvicorn.Config, sock: socket.socket) -> Multiprocess:
    arguments: dict[str, Any] = {"sockets": [sock]}
    if "target" in inspect.signature(Multiprocess).parameters:  # older uvicorn: it runs the target it is given
        arguments["target"] = uvicorn.Server(config).run
    return Multiprocess(config, **arguments)


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to (host, port), inheritable by workers; ServeStartupError in one line otherwise."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        reason = BIND_ERRORS.get(exc.errno or 0, exc.strerror or str(exc))
        raise ServeStartupError(f"cannot listen on {host}:{port}: {reason}") from None
    sock.set_inheritable(True)
    return sock


def _uvicorn_config(app: Any, settings: ServeConfig, *, factory: bool = False) -> uvicorn.Config:
    return BoundedHeadConfig(
        app,
        max_header_bytes=settings.max_header_bytes,
        header_timeout_s=settings.header_timeout_s,
        factory=factory,
        host=settings.host,
        port=settings.port,
        workers=settings.workers,
        log_level="warning",
        access_log=False,  # serve writes its own access log (observe.py): one JSON line with the arm and library
        timeout_graceful_shutdown=settings.shutdown_grace_s,
        proxy_headers=False,  # nothing reads the client address: its middleware was ~2% of CPU per request
    )


def _metrics_dir(configured: Path | None) -> tuple[Path, bool]:
    """The multiprocess metrics folder, emptied of earlier runs' files; True when it is a temporary one."""
    if configured is None:
        return Path(tempfile.mkdtemp(prefix="tfgrpo-metrics-")), True
    return claim_multiprocess_dir(configured), False


def _serving_line(settings: ServeConfig, snapshot: Snapshot, sock: socket.socket) -> str:
    """What the console says once the port is bound (`--port 0`: the port the system chose)."""
    if settings.client_keys is not None:
        auth = "client keys required"
    elif settings.forward_client_auth_header:
        auth = "clients' keys forwarded upstream"
    else:
        auth = "no client keys"
    workers = f"{settings.workers} workers" if settings.workers > 1 else "1 process"
    return (
        f"serving library v{snapshot.version} ({len(snapshot.library)} experiences) "
        f"on http://{settings.host}:{sock.getsockname()[1]}/v1 -> {', '.join(mask_url(url) for url in settings.upstream)}; "
        f"traces: {mask_url(settings.traces)}; {workers}; {auth}"
    )
