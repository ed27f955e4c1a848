"""The FastAPI app of `tfgrpo serve`: OpenAI-compatible routes, feedback, health and the page."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from rewards.registry import get_reward
from tfgrpo.core.config import secret_value
from tfgrpo.llm.client import LLMClient
from tfgrpo.llm.factory import build_client
from tfgrpo.serve.config import ServeConfig
from tfgrpo.serve.exchange import BadRequest, Exchange, parse_body, prepare, reply_from_json, reply_from_sse
from tfgrpo.serve.feedback import FeedbackError, score_feedback
from tfgrpo.serve.live_library import LiveLibrary
from tfgrpo.serve.llm_upstream import LLMUpstream, usage_of
from tfgrpo.serve.page import render_page
from tfgrpo.serve.passthrough import SSEPassthrough
from tfgrpo.serve.traces import TraceStore
from tfgrpo.serve.upstream import Upstream, UpstreamFailure

API_KEY_ENV = "TFGRPO_UPSTREAM_API_KEY"
CHAT_PATH = "/v1/chat/completions"


@dataclass
class ServeState:
    config: ServeConfig
    live: LiveLibrary
    upstream: Upstream | LLMUpstream
    traces: TraceStore


def create_app(config: ServeConfig, *, llm_client: LLMClient | None = None) -> ServeApp:
    """`llm_client` replaces the one an llm: upstream would build (tests pass a scripted backend's)."""
    state = ServeState(
        config=config,
        live=LiveLibrary(config.library, store_dir=config.store_dir),
        upstream=_upstream(config, llm_client),
        traces=TraceStore(config.traces),
    )

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

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
        return _internal_error(exc)

    _add_openai_routes(app, state)
    _add_service_routes(app, state)
    return ServeApp(app)


def _upstream(config: ServeConfig, llm_client: LLMClient | None) -> Upstream | LLMUpstream:
    api_key = secret_value(config.api_key) or os.environ.get(API_KEY_ENV)
    if config.llm_spec is not None:
        return LLMUpstream(llm_client or build_client(config.llm_config(api_key)), config.llm_spec)
    return Upstream(
        config.upstream,
        api_key=api_key,
        timeout_s=config.timeout_s,
        max_retries=config.max_retries,
        backoff_s=config.backoff_s,
    )


class ServeApp:
    """The ASGI app: POST /v1/chat/completions goes straight to its handler, everything else to FastAPI.

    Why not a FastAPI route: its middleware chain and routing (error, telemetry, body-limit, exception and
    exit-stack middlewares, the router, the request handler) cost about a fifth of the proxy's CPU per
    request (py-spy, benchmarks/serve.py), and the hot route needs none of them: it reads the body
    itself, answers its own errors and catches the unexpected. Lifespan and all other routes stay FastAPI's.
    """

    def __init__(self, api: FastAPI):
        self.api = api
        self.state = api.state  # `app.state.serve`, as on the FastAPI app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != CHAT_PATH:
            await self.api(scope, receive, send)
            return
        if scope["method"] != "POST":
            response: Response | SSEPassthrough = _error(405, f"{CHAT_PATH} takes POST", "method_not_allowed")
        else:
            try:
                body = await read_body(receive, self.state.serve.config.max_request_bytes)
                response = await chat_completions(self.state.serve, Request(scope, _replay(body)))
            except RequestTooLarge as exc:
                response = _error(413, str(exc), "request_too_large")
            except Exception as exc:  # noqa: BLE001 - one line and a 500, never a traceback to the client
                response = _internal_error(exc)
        await response(scope, receive, send)


class RequestTooLarge(Exception):
    pass


async def read_body(receive: Any, limit: int) -> bytes:
    """The request body, refused as soon as it passes `limit` bytes (a hostile client cannot make the
    proxy buffer gigabytes)."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise RequestTooLarge(f"request body over {limit} bytes (max_request_bytes)")
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes) -> Any:
    """A `receive` that hands the already-read body to Starlette's Request once, then reports a disconnect."""
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}

    return receive


async def chat_completions(state: ServeState, request: Request) -> Response | SSEPassthrough:
    config = state.config
    inject = request.headers.get("x-tfgrpo-inject")
    try:
        arguments = dict(
            body=parse_body(await request.body()),
            live=state.live,
            holdout=config.holdout,
            arm_key=request.headers.get(config.arm_key_header),
            inject=inject,
            default_inject=config.inject,
            model=config.model,
        )
        # topk embeds the query (tens of ms of CPU): off the event loop, so other requests keep flowing
        topk = (inject or config.inject).strip().lower().startswith("topk")
        exchange = await asyncio.to_thread(prepare, **arguments) if topk else prepare(**arguments)
    except BadRequest as exc:
        return _error(400, str(exc), "invalid_request_error")
    if isinstance(state.upstream, LLMUpstream):
        return await _complete_llm(state, state.upstream, exchange)
    if exchange.stream:
        return await _stream(state, exchange)
    return await _complete(state, exchange)


def _add_openai_routes(app: FastAPI, state: ServeState) -> None:
    @app.get("/v1/models")
    async def models() -> Response:
        try:
            status, content = await state.upstream.get("/models")
        except Exception as exc:  # noqa: BLE001 - any transport failure is the upstream's, reported as 502
            return _error(502, f"upstream unreachable: {type(exc).__name__}", "upstream_unreachable")
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
        try:
            exchange_id, reward, gold = await asyncio.to_thread(
                score_feedback, await request.body(), state.traces, _reward_for(config)
            )
        except FeedbackError as exc:
            return _error(
                exc.status, str(exc), {400: "invalid_request_error", 404: "not_found"}.get(exc.status, "conflict")
            )
        return JSONResponse({"id": exchange_id, "reward": reward, "gold": gold})

    @app.get("/", response_class=HTMLResponse)
    async def page() -> HTMLResponse:
        summary = await asyncio.to_thread(state.traces.summary)
        return HTMLResponse(render_page(state.live.current.library, summary, holdout=config.holdout))


def _reward_for(
    config: ServeConfig,
):  # -> a callable(gold, reply) scoring one reply, built per call (rewards are cheap)
    def score(reply: str, gold: str) -> float | None:
        return get_reward(config.reward).score([reply], answer=[gold])[0].value

    return score


async def _complete(state: ServeState, exchange: Exchange) -> Response:
    try:
        response, url = await state.upstream.post("/chat/completions", exchange.upstream_bytes())
        try:
            content = await response.read()
        finally:
            response.release()
    except UpstreamFailure as failure:
        return _failed(state, exchange, failure)
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:  # the body broke off after a 2xx status line
        return _failed(
            state,
            exchange,
            UpstreamFailure(502, _error_bytes(f"upstream reply broke off: {type(exc).__name__}", "upstream_error")),
        )
    reply, usage = reply_from_json(content)
    _trace(state, exchange, status=response.status, reply=reply, usage=usage, upstream=url)
    return Response(content, status_code=response.status, media_type="application/json", headers=exchange.headers())


async def _complete_llm(state: ServeState, upstream: LLMUpstream, exchange: Exchange) -> Response:
    """A whole reply from the client layer, sent as JSON or as a finished SSE stream."""
    try:
        completions = await upstream.complete(exchange)
    except UpstreamFailure as failure:
        return _failed(state, exchange, failure)
    usage = usage_of(completions)
    _trace(state, exchange, status=200, reply=completions[0].text, usage=usage, upstream=upstream.urls[0])
    if exchange.stream:
        content, media_type = upstream.sse_body(exchange, completions), "text/event-stream"
    else:
        content, media_type = upstream.json_body(exchange, completions), "application/json"
    return Response(content, media_type=media_type, headers=exchange.headers())


def _trace(
    state: ServeState,
    exchange: Exchange,
    *,
    status: int,
    reply: str | None,
    usage: dict[str, Any] | None,
    upstream: str | None,
) -> None:
    # Queued, not written: the trace writer thread stores it, off the request's path.
    row = exchange.trace_row(status=status, reply=reply, usage=usage, upstream=upstream)
    if reply is not None:
        state.upstream.record(
            prompt_tokens=row["prompt_tokens"] or 0,
            completion_tokens=row["completion_tokens"] or 0,
            latency_s=row["latency_ms"] / 1000,
        )
    state.traces.add(row)


async def _stream(state: ServeState, exchange: Exchange) -> Response | SSEPassthrough:
    try:
        response, url = await state.upstream.post("/chat/completions", exchange.upstream_bytes())
    except UpstreamFailure as failure:
        return _failed(state, exchange, failure)

    def traced(status: int, sent: bytes) -> None:
        reply, usage = reply_from_sse(sent)
        _trace(state, exchange, status=status, reply=reply, usage=usage, upstream=url)

    return SSEPassthrough(response, exchange.headers(), traced)


def _failed(state: ServeState, exchange: Exchange, failure: UpstreamFailure) -> Response:
    _trace(state, exchange, status=failure.status, reply=None, usage=None, upstream=None)
    headers = failure.headers | exchange.headers() | {"x-tfgrpo-attempts": str(failure.attempts)}
    headers.pop("content-type", None)
    return Response(failure.body, status_code=failure.status, media_type="application/json", headers=headers)


def _internal_error(exc: Exception) -> JSONResponse:
    detail = str(exc).splitlines()[0] if str(exc) else ""
    return _error(500, f"internal error: {type(exc).__name__}: {detail}", "internal_error")


def _error(status: int, message: str, kind: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind}}, status_code=status)


def _error_bytes(message: str, kind: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": kind}}).encode()
