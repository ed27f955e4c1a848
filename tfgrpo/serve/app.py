"""The ASGI app of `tfgrpo serve`: OpenAI-compatible routes, feedback, health, readiness, metrics and the page.

Every request passes `ServeApp` first: the input bounds (`limits.py`) are checked there for every route,
then the client key (`auth.py`) for the /v1/ routes, then POST /v1/chat/completions goes to its own
handler (`chat.py`) and everything else to FastAPI. Every error, on every route, is an OpenAI-style error
object (`errors.py`). Every request ends in one access-log line and the request metrics (`observe.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware.cors import CORSMiddleware

from tfgrpo.llm.client import LLMClient
from tfgrpo.rewards.registry import get_reward
from tfgrpo.serve.admin import add_admin_routes
from tfgrpo.serve.chat import chat_completions
from tfgrpo.serve.config import ServeConfig
from tfgrpo.serve.decider import Decider, Reading
from tfgrpo.serve.errors import RequestRejected, error_response, internal_error
from tfgrpo.serve.feedback import score_feedback
from tfgrpo.serve.limits import check_head, read_body, replay
from tfgrpo.serve.metrics import CONTENT_TYPE
from tfgrpo.serve.observe import RequestRecord, log_event
from tfgrpo.serve.page import deployment_section, render_page
from tfgrpo.serve.passthrough import SSEPassthrough
from tfgrpo.serve.state import ServeState

CHAT_PATH = "/v1/chat/completions"
#: the routes a client key guards (service routes stay open to probes and scrapers)
GUARDED_PREFIX = "/v1/"
#: headers of ours a browser script may read from a cross-origin answer
EXPOSED_HEADERS = [
    "x-tfgrpo-arm",
    "x-tfgrpo-library-version",
    "x-tfgrpo-library-hash",
    "x-tfgrpo-exchange-id",
    "x-tfgrpo-attempts",
]
#: where the request's RequestRecord travels in the ASGI scope, for FastAPI's error handlers
RECORD = "tfgrpo.record"


def create_app(
    config: ServeConfig, *, llm_client: LLMClient | None = None, metrics_dir: Path | None = None
) -> ServeApp:
    """`llm_client` replaces the one an llm: upstream would build (tests pass a scripted backend's);
    `metrics_dir`: prometheus_client's multiprocess folder (several workers; see metrics.py)."""
    state = ServeState.build(config, llm_client, metrics_dir=metrics_dir)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        await state.upstream.open()
        state.traces.start()
        watchers = _watchers(state)
        log_event("worker_started", library_version=state.live.current.version, workers=config.workers)
        try:
            yield
        finally:
            for watcher in watchers:
                watcher.cancel()
            await state.upstream.aclose()
            await asyncio.to_thread(state.traces.close)
            state.observer.metrics.close()
            log_event("worker_stopped")

    app = FastAPI(title="tfgrpo serve", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.serve = state
    _add_error_handlers(app, state)
    _add_openai_routes(app, state)
    _add_service_routes(app, state)
    add_admin_routes(app, state, RECORD)
    return ServeApp(app, cors_origins=config.cors_origins)


def _watchers(state: ServeState) -> list[asyncio.Task[None]]:
    """The worker's background tasks: the library file's watcher, or a deployment's poll and decider."""
    config = state.config
    live = state.deployment
    if live is None:
        return [asyncio.create_task(state.live.watch(config.reload_interval_s))]
    metrics = state.observer.metrics

    def read(reading: Reading | None) -> None:
        if reading is not None and reading.state.challenger is not None:
            metrics.test_reading(reading.state.challenger[:12], *reading.gauges())

    def decided(action: str, by: str) -> None:
        metrics.decisions.labels(action, by).inc()
        live.refresh()  # this worker serves the decision at once; the others at their next poll

    decider = Decider(
        live.deployment,
        state.traces.engine,
        config.deployment,
        (config.reward_min, config.reward_max),
        on_reading=read,
        on_decision=decided,
    )
    return [
        asyncio.create_task(live.watch(config.deployment.poll_interval_s)),
        asyncio.create_task(decider.run()),
    ]


class ServeApp:
    """The ASGI app: bounds for every request, then the chat route straight to its handler, the rest to FastAPI.

    Why the chat route is not a FastAPI route: its middleware chain and routing (error, telemetry,
    body-limit, exception and exit-stack middlewares, the router, the request handler) cost about a fifth
    of the proxy's CPU per request (py-spy, benchmarks/serve.py), and the hot route needs none of them: it
    answers its own errors and catches the unexpected. Lifespan and all other routes stay FastAPI's.
    """

    def __init__(self, api: FastAPI, *, cors_origins: list[str] | None = None):
        self.api = api
        self.state = api.state  # `app.state.serve`, as on the FastAPI app
        # Starlette's CORS middleware in front of everything (preflights never reach the key check); none
        # at all without origins, so the hot path pays nothing
        self._entry: Any = self._serve_scope
        if cors_origins:
            self._entry = CORSMiddleware(
                self._serve_scope,
                allow_origins=cors_origins,
                allow_methods=["GET", "POST", "OPTIONS"],
                allow_headers=["*"],
                expose_headers=EXPOSED_HEADERS,
                max_age=600,
            )

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.api(scope, receive, send)
            return
        state: ServeState = self.state.serve
        record = scope[RECORD] = RequestRecord(scope["method"], scope["path"])

        async def send_recorded(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                record.status = message["status"]
            await send(message)

        try:
            await self._entry(scope, receive, send_recorded)
        except Exception:
            if not record.status:  # nothing answered yet: uvicorn answers 500 and logs it
                raise
            # FastAPI answered its 500 (and the handler logged it), then re-raised: nothing more to say
        finally:
            state.observer.request(record)

    async def _serve_scope(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await self._serve(self.state.serve, scope, receive, send, scope[RECORD])

    async def _serve(
        self, state: ServeState, scope: dict[str, Any], receive: Any, send: Any, record: RequestRecord
    ) -> None:
        chat = scope["path"] == CHAT_PATH
        try:
            body = await _bounded_body(state, scope, receive, record, chat=chat)
        except RequestRejected as rejected:
            record.error = rejected.code
            await rejected.response()(scope, receive, send)
            return
        if not chat:
            await self.api(scope, replay(body), send)
            return
        try:
            response: Response | SSEPassthrough = await chat_completions(state, Headers(scope=scope), body, record)
        except RequestRejected as rejected:
            record.error = rejected.code
            response = rejected.response()
        except Exception as exc:  # noqa: BLE001 - one line and a 500, never a traceback to the client
            record.error = "internal_error"
            state.observer.internal_error(exc, scope["path"])
            response = internal_error(exc, state.hidden)
        await response(scope, receive, send)  # a stream listens on `receive` for the client hanging up


async def _bounded_body(
    state: ServeState, scope: dict[str, Any], receive: Any, record: RequestRecord, *, chat: bool
) -> bytes:
    """The request's body, once its head, its client key and its body passed (RequestRejected otherwise)."""
    config = state.config
    check_head(scope, config.max_header_bytes)
    if state.client_keys is not None and scope["path"].startswith(GUARDED_PREFIX):
        authorization = next((value for name, value in scope["headers"] if name == b"authorization"), None)
        record.identity = state.client_keys.check(authorization)
        record.client = record.identity[:8]
    if chat and scope["method"] != "POST":
        raise RequestRejected(405, f"{CHAT_PATH} takes POST", "method_not_allowed")
    if chat:
        return await read_body(receive, config.max_request_bytes, config.body_timeout_s, setting="max_request_bytes")
    return await read_body(receive, config.max_feedback_bytes, config.body_timeout_s, setting="max_feedback_bytes")


def _add_error_handlers(app: FastAPI, state: ServeState) -> None:
    def note(request: Request, code: str) -> None:
        record = request.scope.get(RECORD)
        if record is not None:
            record.error = code

    @app.exception_handler(RequestRejected)
    async def _rejected(request: Request, exc: RequestRejected) -> JSONResponse:
        note(request, exc.code)
        return exc.response()

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
        where = f"{request.method} {request.url.path[:100]}"  # a path can be as long as the header bound
        note(request, {404: "unknown_route", 405: "method_not_allowed"}.get(exc.status_code, "http_error"))
        if exc.status_code == 404:
            return error_response(404, f"{where}: no such route", "unknown_route")
        if exc.status_code == 405:
            return error_response(405, f"{where}: method not allowed", "method_not_allowed", headers=exc.headers)
        return error_response(exc.status_code, f"{where}: {exc.detail}"[:200], "http_error", headers=exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        note(request, "internal_error")
        state.observer.internal_error(exc, request.url.path)
        return internal_error(exc, state.hidden)


def _add_openai_routes(app: FastAPI, state: ServeState) -> None:
    forward = state.config.forward_client_auth_header

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        authorization = request.headers.get("authorization") if forward else None
        try:
            status, content = await state.upstream.get("/models", authorization=authorization)
        except Exception as exc:  # noqa: BLE001 - any transport failure is the upstream's, reported as 502
            state.observer.upstream_failed("upstream_unreachable", 502, 1)
            return error_response(502, f"upstream unreachable: {type(exc).__name__}", "upstream_unreachable")
        return Response(content, status_code=status, media_type="application/json")


def _add_service_routes(app: FastAPI, state: ServeState) -> None:
    config = state.config

    @app.get("/health")
    async def health() -> dict[str, Any]:
        """Liveness (this answer at all) with the worker's state; `status` is `degraded` while not ready."""
        snapshot = state.live.current
        readiness = await state.readiness.check()
        return {
            "status": "ok" if readiness["ready"] else "degraded",
            "ready": readiness["ready"],
            "checks": {"upstream": readiness["upstream"], "trace_store": readiness["trace_store"]},
            "library": config.library.name,
            "library_version": snapshot.version,
            "library_hash": snapshot.content_hash,
            "experiences": len(snapshot.library),
            "reloads": state.live.reloads,
            "reload_errors": state.live.reload_errors,
            "holdout": config.holdout,
            "inject": config.inject,
            "upstreams": len(config.upstream),  # how many, never where: upstream URLs are internal
            "upstream_calls": state.upstream.snapshot(),
            "trace_write_errors": state.traces.write_errors,
            "workers": config.workers,
            "pid": os.getpid(),
            "deployment": _deployment_health(state),
        }

    @app.get("/ready")
    async def ready() -> JSONResponse:
        """200 when this worker can serve (an upstream answers, the trace store answers), else 503."""
        readiness = await state.readiness.check()
        return JSONResponse(readiness, status_code=200 if readiness["ready"] else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        exposition = await asyncio.to_thread(state.observer.metrics.exposition)  # reads files with several workers
        return Response(exposition, media_type=CONTENT_TYPE)

    @app.post("/v1/feedback")
    async def feedback(request: Request) -> Response:
        body = await request.body()
        rater = request.scope[RECORD].identity  # set by the client-key check; None in open mode
        rater_is_admin = state.client_keys is not None and state.client_keys.is_admin(rater)
        deadline = asyncio.get_running_loop().time() + config.feedback_wait_s
        while True:
            try:
                exchange_id, reward, gold = await asyncio.to_thread(
                    score_feedback,
                    body,
                    state.traces,
                    _reward_for(config),
                    reward_bounds=(config.reward_min, config.reward_max),
                    max_json_depth=config.max_json_depth,
                    rater=rater,
                    rater_is_admin=rater_is_admin,
                )
                return JSONResponse({"id": exchange_id, "reward": reward, "gold": gold})
            except RequestRejected as rejected:
                # served by another worker or replica, not written yet? Its writer writes every 0.1 s.
                if rejected.code != "exchange_not_found" or asyncio.get_running_loop().time() >= deadline:
                    raise
            await asyncio.sleep(0.05)

    @app.get("/", response_class=HTMLResponse)
    async def page() -> HTMLResponse:
        summary = await asyncio.to_thread(state.traces.summary)
        deployment = None
        if state.deployment is not None:
            bounds = (config.reward_min, config.reward_max)
            deployment = await asyncio.to_thread(
                deployment_section, state.deployment, state.traces.engine, config.deployment, bounds
            )
        page = render_page(state.live.current.library, summary, holdout=config.holdout, deployment=deployment)
        return HTMLResponse(page)


def _deployment_health(state: ServeState) -> dict[str, Any] | None:
    """The deployment this worker serves now (None without one): its revision and versions."""
    if state.deployment is None:
        return None
    served = state.deployment.current
    challenger = served.challenger
    return {
        "revision": served.revision,
        "champion": served.champion.content_hash,
        "challenger": None if challenger is None else challenger.content_hash,
        "challenger_share": state.config.deployment.challenger_share,
    }


def _reward_for(
    config: ServeConfig,
):  # -> a callable(reply, gold) scoring one reply, built per call (rewards are cheap)
    def score(reply: str, gold: str) -> float | None:
        return get_reward(config.reward).score([reply], answer=[gold])[0].value

    return score
