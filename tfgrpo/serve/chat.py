"""`POST /v1/chat/completions`: one exchange, from the client's bytes to the upstream and back, traced.

The client gets the upstream's bytes as they came (a JSON body, or an SSE stream copied chunk by chunk),
except where they would not be what it asked for: a reply that came whole to a `stream: true` request
(an `llm:` upstream, or a server that ignores `stream`) is written out as a finished SSE stream. Every
exchange is traced with the text of every choice, failed ones with their status and error code, and
reported to the request's `RequestRecord` (arm, library, upstream attempts, error) for the access log.
With `forward_client_auth_header`, the client's own Authorization header goes upstream instead of the server's key.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.datastructures import Headers
from starlette.responses import Response

from tfgrpo.core.secrets import mask_url
from tfgrpo.serve.errors import RequestRejected
from tfgrpo.serve.exchange import Exchange, parse_body, prepare
from tfgrpo.serve.live_library import Snapshot
from tfgrpo.serve.llm_upstream import LLMUpstream, usage_of
from tfgrpo.serve.observe import RequestRecord
from tfgrpo.serve.passthrough import SSEPassthrough
from tfgrpo.serve.replies import StreamText, choice_texts, sse_from_completion, wants_usage
from tfgrpo.serve.state import ServeState
from tfgrpo.serve.upstream import JsonReply, Upstream, UpstreamFailure

PATH = "/chat/completions"
SSE = "text/event-stream"
#: names a stored version (a content-hash prefix) to serve this request instead of its arm's
PIN_HEADER = "x-tfgrpo-version"


async def chat_completions(
    state: ServeState, headers: Headers, raw: bytes, record: RequestRecord
) -> Response | SSEPassthrough:
    """The answer to one chat request (RequestRejected for a request that cannot be served)."""
    config = state.config
    authorization = headers.get("authorization") if config.forward_client_auth_header else None
    if config.forward_client_auth_header and not authorization:
        raise RequestRejected(
            401,
            "this server forwards your own key upstream: send Authorization: Bearer YOUR_UPSTREAM_KEY",
            "missing_api_key",
            headers={"www-authenticate": "Bearer"},
        )
    inject = headers.get("x-tfgrpo-inject")
    admin = state.client_keys is not None and state.client_keys.is_admin(record.identity)
    deployment = state.deployment
    pin = headers.get(PIN_HEADER)
    pinned = None if pin is None else await asyncio.to_thread(_pinned, state, pin, admin)
    arguments: dict[str, Any] = dict(
        body=parse_body(raw, max_json_depth=config.max_json_depth, max_choices=config.max_choices),
        live=state.live,
        holdout=config.holdout,
        arm_header=headers.get(config.arm_key_header),
        identity=record.identity,
        admin=admin,
        inject=inject,
        default_inject=config.inject,
        model=config.model,
        served=None if deployment is None else deployment.current,
        challenger_share=config.deployment.challenger_share,
        pinned=pinned,
    )
    # topk embeds the query (tens of ms of CPU): off the event loop, so other requests keep flowing
    topk = (inject or config.inject).strip().lower().startswith("topk")
    exchange = await asyncio.to_thread(prepare, **arguments) if topk else prepare(**arguments)
    record.exchange = exchange
    if isinstance(state.upstream, LLMUpstream):
        return await _complete_llm(state, state.upstream, exchange, record)
    if exchange.stream:
        return await _stream(state, state.upstream, exchange, record, authorization)
    return await _complete(state, state.upstream, exchange, record, authorization)


def _pinned(state: ServeState, prefix: str, admin: bool) -> Snapshot:
    """The version an `x-tfgrpo-version` header names. An admin key may pin (with client keys on), anyone in
    open mode, where nothing about the caller is trusted anyway; a pinned exchange is arm `pin`, which no test
    counts, so pinning cannot steer a decision."""
    if state.deployment is None:
        raise RequestRejected(400, f"{PIN_HEADER}: pinning serves stored versions (deployment.enabled)", "bad_version")
    if state.client_keys is not None and not admin:
        raise RequestRejected(403, f"{PIN_HEADER}: only an admin key may pin a version", "pin_needs_admin")
    return state.deployment.pinned(prefix)


async def _complete(
    state: ServeState, upstream: Upstream, exchange: Exchange, record: RequestRecord, authorization: str | None
) -> Response:
    try:
        reply = await upstream.post_json(PATH, exchange.upstream_bytes(), authorization=authorization)
    except UpstreamFailure as failure:
        return _failed(state, exchange, failure, record)
    record.attempts = reply.attempts
    _trace_whole(state, exchange, reply)
    return Response(reply.content, status_code=reply.status, media_type="application/json", headers=exchange.headers())


async def _stream(
    state: ServeState, upstream: Upstream, exchange: Exchange, record: RequestRecord, authorization: str | None
) -> Response | SSEPassthrough:
    try:
        reply = await upstream.post_stream(PATH, exchange.upstream_bytes(), authorization=authorization)
    except UpstreamFailure as failure:
        return _failed(state, exchange, failure, record)
    record.attempts = reply.attempts
    if isinstance(reply, JsonReply):  # the upstream ignored `stream`: its whole reply, as a finished stream
        _trace_whole(state, exchange, reply)
        content = sse_from_completion(reply.data, include_usage=wants_usage(exchange.body))
        return Response(content, status_code=reply.status, media_type=SSE, headers=exchange.headers())

    def traced(status: int, cut: str | None, text: StreamText) -> None:
        if cut is not None:  # the head said 200; the log and the trace say how it really ended
            record.error, record.status, record.cut = cut, status, True
            state.observer.upstream_failed(cut, status, reply.attempts, exchange.id)
        replies, lengths = text.texts(), text.lengths()
        _trace(
            state,
            exchange,
            status=status,
            replies=replies,
            usage=text.usage,
            upstream=reply.url,
            error=cut,
            lengths=lengths,
        )

    config = state.config
    return SSEPassthrough(
        reply.response,
        exchange.headers(),
        traced,
        max_bytes=config.max_stream_bytes,
        max_trace_chars=config.max_trace_chars,
    )


async def _complete_llm(
    state: ServeState, upstream: LLMUpstream, exchange: Exchange, record: RequestRecord
) -> Response:
    """A whole reply from the client layer, sent as JSON or as a finished SSE stream."""
    try:
        completions = await upstream.complete(exchange)
    except UpstreamFailure as failure:
        return _failed(state, exchange, failure, record)
    data = upstream.completion(exchange, completions)
    replies = [completion.text for completion in completions]
    _trace(state, exchange, status=200, replies=replies, usage=usage_of(completions), upstream=upstream.urls[0])
    if exchange.stream:
        content, media_type = sse_from_completion(data, include_usage=wants_usage(exchange.body)), SSE
    else:
        content, media_type = json.dumps(data, ensure_ascii=False).encode("utf-8"), "application/json"
    return Response(content, media_type=media_type, headers=exchange.headers())


def _trace_whole(state: ServeState, exchange: Exchange, reply: JsonReply) -> None:
    usage = reply.data.get("usage")
    _trace(state, exchange, status=reply.status, replies=choice_texts(reply.data), usage=usage, upstream=reply.url)


def _trace(
    state: ServeState,
    exchange: Exchange,
    *,
    status: int,
    replies: list[str] | None,
    usage: dict[str, Any] | None,
    upstream: str | None,
    error: str | None = None,
    lengths: list[int] | None = None,
) -> None:
    # Queued, not written: the trace writer thread stores it, off the request's path.
    # The upstream as shown, never as sent: its query string may be how it authenticates (core.secrets).
    shown = None if upstream is None else mask_url(upstream)
    row = exchange.trace_row(
        status=status,
        replies=replies,
        usage=usage,
        upstream=shown,
        error=error,
        max_chars=state.config.max_trace_chars,
        lengths=lengths,
    )
    if replies is not None:
        state.upstream.record(
            prompt_tokens=row["prompt_tokens"] or 0,
            completion_tokens=row["completion_tokens"] or 0,
            latency_s=row["latency_ms"] / 1000,
        )
    state.traces.add(row)


def _failed(state: ServeState, exchange: Exchange, failure: UpstreamFailure, record: RequestRecord) -> Response:
    record.attempts, record.error = failure.attempts, failure.code
    state.observer.upstream_failed(failure.code, failure.status, failure.attempts, exchange.id)
    _trace(state, exchange, status=failure.status, replies=None, usage=None, upstream=None, error=failure.code)
    headers = failure.headers | exchange.headers() | {"x-tfgrpo-attempts": str(failure.attempts)}
    headers.pop("content-type", None)
    return Response(failure.body, status_code=failure.status, media_type="application/json", headers=headers)
