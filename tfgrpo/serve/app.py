"""The ASGI app of `tfgrpo serve`: OpenAI-compatible routes, feedback, health and the page.

Every request passes `ServeApp` first: the input bounds (`limits.py`) are checked there for every route,
then POST /v1/chat/completions goes to its own handler (`chat.py`) and everything else to FastAPI. Every
error, on every route, is an OpenAI-style error object (`errors.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException

from rewards.registry import get_reward
from tfgrpo.llm.client import LLMClient
from tfgrpo.serve.chat import chat_completions
from tfgrpo.serve.config import ServeConfig
from tfgrpo.serve.errors import RequestRejected, error_response, internal_error
from tfgrpo.serve.feedback import score_feedback
from tfgrpo.serve.limits import check_head, read_body, replay
from tfgrpo.serve.page import render_page
from tfgrpo.serve.passthrough import SSEPassthrough
from tfgrpo.serve.state import ServeState

CHAT_PATH = "/v1/chat/completions"


def create_app(config: ServeConfig, *, llm_client: LLMClient | None = None) -> ServeApp:
    """`llm_client` replaces the one an llm: upstream would build (tests pass a scripted backend's)."""
    state = ServeState.build(config, llm_client)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        await state.upstream.open()
        state.traces.start()
        watcher = asyncio.create_task(state.live.watch(config.reload_interval_s))
        try:
            yield
        finally:
            watcher.cancel()
            await state.upstream.aclose()
            await asyncio.to_thread(state.traces.close)

    app = FastAPI(title="tfgrpo serve", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.serve = state
    _add_error_handlers(app, state)
    _add_openai_routes(app, state)
    _add_service_routes(app, state)
    return ServeApp(app)


class ServeApp:
    """The ASGI app: bounds for every request, then the chat route straight to its handler, the rest to FastAPI.

    Why the chat route is not a FastAPI route: its middleware chain and routing (error, telemetry,
    body-limit, exception and exit-stack middlewares, the router, the request handler) cost about a fifth
    of the proxy's CPU per request (py-spy, benchmarks/serve.py), and the hot route needs none of them: it
    answers its own errors and catches the unexpected. Lifespan and all other routes stay FastAPI's.
    """

    def __init__(self, api: FastAPI):
        self.api = api
        self.state = api.state  # `app.state.serve`, as on the FastAPI app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.api(scope, receive, send)
            return
        state: ServeState = self.state.serve
        chat = scope["path"] == CHAT_PATH
        try:
            body = await _bounded_body(state.config, scope, receive, chat=chat)
        except RequestRejected as rejected:
            await rejected.response()(scope, receive, send)
            return
        if not chat:
            await self.api(scope, replay(body), send)
            return
        try:
            response: Response | SSEPassthrough = await chat_completions(state, Headers(scope=scope), body)
        except RequestRejected as rejected:
            response = rejected.response()
        except Exception as exc:  # noqa: BLE001 - one line and a 500, never a traceback to the client
            response = internal_error(exc, state.hidden)
        await response(scope, receive, send)  # a stream listens on `receive` for the client hanging up


async def _bounded_body(config: ServeConfig, scope: dict[str, Any], receive: Any, *, chat: bool) -> bytes:
    """The request's body, once its head and body passed the bounds (RequestRejected otherwise)."""
    check_head(scope, config.max_header_bytes)
    if chat and scope["method"] != "POST":
        raise RequestRejected(405, f"{CHAT_PATH} takes POST", "method_not_allowed")
    if chat:
        return await read_body(receive, config.max_request_bytes, config.body_timeout_s, setting="max_request_bytes")
    return await read_body(receive, config.max_feedback_bytes, config.body_timeout_s, setting="max_feedback_bytes")


def _add_error_handlers(app: FastAPI, state: ServeState) -> None:
    @app.exception_handler(RequestRejected)
    async def _rejected(_request: Request, exc: RequestRejected) -> JSONResponse:
        return exc.response()

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
        where = f"{request.method} {request.url.path[:100]}"  # a path can be as long as the header bound
        if exc.status_code == 404:
            return error_response(404, f"{where}: no such route", "unknown_route")
        if exc.status_code == 405:
            return error_response(405, f"{where}: method not allowed", "method_not_allowed", headers=exc.headers)
        return error_response(exc.status_code, f"{where}: {exc.detail}"[:200], "http_error", headers=exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
        return internal_error(exc, state.hidden)


def _add_openai_routes(app: FastAPI, state: ServeState) -> None:
    @app.get("/v1/models")
    async def models() -> Response:
        try:
            status, content = await state.upstream.get("/models")
        except Exception as exc:  # noqa: BLE001 - any transport failure is the upstream's, reported as 502
            return error_response(502, f"upstream unreachable: {type(exc).__name__}", "upstream_unreachable")
        return Response(content, status_code=status, media_type="application/json")


def _add_service_routes(app: FastAPI, state: ServeState) -> None:
    config = state.config

    @app.get("/health")
    async def health() -> dict[str, Any]:
        snapshot = state.live.current
        return {
            "status": "ok",
            "library": str(config.library),
            "library_version": snapshot.version,
            "library_hash": snapshot.content_hash,
            "experiences": len(snapshot.library),
            "reloads": state.live.reloads,
            "reload_errors": state.live.reload_errors,
            "holdout": config.holdout,
            "inject": config.inject,
            "upstreams": config.upstream,
            "upstream_calls": state.upstream.snapshot(),
            "trace_write_errors": state.traces.write_errors,
        }

    @app.post("/v1/feedback")
    async def feedback(request: Request) -> Response:
        exchange_id, reward, gold = await asyncio.to_thread(
            score_feedback,
            await request.body(),
            state.traces,
            _reward_for(config),
            reward_bounds=(config.reward_min, config.reward_max),
            max_json_depth=config.max_json_depth,
        )
        return JSONResponse({"id": exchange_id, "reward": reward, "gold": gold})

    @app.get("/", response_class=HTMLResponse)
    async def page() -> HTMLResponse:
        summary = await asyncio.to_thread(state.traces.summary)
        return HTMLResponse(render_page(state.live.current.library, summary, holdout=config.holdout))


def _reward_for(
    config: ServeConfig,
):  # -> a callable(reply, gold) scoring one reply, built per call (rewards are cheap)
    def score(reply: str, gold: str) -> float | None:
        return get_reward(config.reward).score([reply], answer=[gold])[0].value

    return score
