"""Forwarding to the upstream server(s): the raw OpenAI request body in, the raw reply (or SSE stream) out.

Why not `LLMClient.chat`: a proxy must pass every field it does not understand (tools, response_format,
logprobs, stream_options, ...) and stream bytes as they come, while `ChatRequest` is a typed subset and
returns whole completions. So the bytes go through one pooled aiohttp session (its pool is the cheaper
under many concurrent requests; benchmarks/serve.py), with the client layer's policy: each failed attempt
becomes its typed error (`map_status_error` says which statuses are transient), and `tfgrpo.llm.retry`
(the client's own retry loop, Retry-After cap, backoff and least-busy routing) decides what happens next;
its `Accounting` counts calls, tokens, latency, failures and retries by cause. A request is retried only
before any byte reached the client (a 429/5xx/timeout/refused connection, or a 2xx whose body is not a
chat.completion object: truncated, invalid JSON); then the last status goes back unchanged, except a bad
body, which becomes a 502 (a client must never get a 200 it cannot parse).

Nothing the upstream sends is held unbounded: a whole reply past `max_reply_bytes` is a 502
`upstream_reply_too_large` (not retried: the same request gets the same reply), an error body past
`max_error_bytes` is replaced by one line of ours under the upstream's status, and a redirect is never
followed (it would re-POST the library and the client's messages to wherever it points): a 3xx is a 502
`upstream_redirect` naming the status.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import aiohttp
from yarl import URL

from tfgrpo.core.secrets import url_with_path
from tfgrpo.llm.accounting import RETRY_CAUSES, Accounting
from tfgrpo.llm.backends.errors_map import map_status_error
from tfgrpo.llm.errors import (
    ConnectionFailedError,
    MalformedResponseError,
    RequestFailedError,
    RequestTimeoutError,
    TransientError,
)
from tfgrpo.llm.retry import LeastBusy, RetryPolicy
from tfgrpo.serve.errors import error_bytes

TAG = "serve"


@dataclass
class UpstreamFailure(Exception):
    """The upstream's final answer was an error: `status` and `body` go back to the client as they are."""

    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    attempts: int = 1
    code: str = "upstream_error"  # what the trace's `error` records

    def __str__(self) -> str:
        return f"upstream answered {self.status} after {self.attempts} attempt(s)"


@dataclass
class JsonReply:
    """A whole 2xx chat.completion: the bytes as the upstream sent them, and parsed."""

    status: int
    content: bytes
    data: dict[str, Any]
    url: str
    attempts: int = 1


@dataclass
class StreamReply:
    """A 2xx SSE response whose body is not read yet: the caller streams it, then releases it."""

    response: aiohttp.ClientResponse
    url: str
    attempts: int = 1


@dataclass
class RetryCounters:
    timeouts: int = 0
    by_status: dict[int, int] = field(default_factory=dict)


class Upstream:
    def __init__(
        self,
        urls: list[str],
        *,
        api_key: str | None,
        timeout_s: float,
        max_retries: int,
        backoff_s: float,
        on_retry: Callable[[str], None] | None = None,
        max_reply_bytes: int = 16 * 1024 * 1024,
        max_error_bytes: int = 64 * 1024,
    ):
        """`max_retries`, `backoff_s`: serve's own settings of the client layer's `RetryPolicy` (its other
        fields, the Retry-After cap included, are the client's). `on_retry(cause)`: called for each attempt
        retried (serve counts them). `max_reply_bytes`, `max_error_bytes`: the most of a whole reply and of
        an error body read (a stream is bounded where it is copied: passthrough.py)."""
        self.max_reply_bytes = max_reply_bytes
        self.max_error_bytes = max_error_bytes
        self.urls = urls
        self.retry = RetryPolicy(max_retries=max_retries, backoff_initial_s=backoff_s)
        self.router = LeastBusy(urls)
        self.accounting = Accounting()
        self.counters = RetryCounters()
        self.on_retry = on_retry
        self._headers = {"content-type": "application/json"} | (
            {"authorization": f"Bearer {api_key}"} if api_key else {}
        )
        self._timeout_s = timeout_s
        self._targets: dict[tuple[str, str], URL] = {}  # parsed once: yarl parses a str URL on every request
        self._session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        # No total deadline (a stream may run long); a timeout is `timeout_s` without a byte from the upstream.
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self._timeout_s, sock_read=self._timeout_s)
        # No cookie jar: a proxy must not keep one client's Set-Cookie for the next (and it costs CPU per request).
        self._session = aiohttp.ClientSession(
            timeout=timeout,
            connector=aiohttp.TCPConnector(limit=0),
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def get(self, path: str, *, authorization: str | None = None) -> tuple[int, bytes]:
        url = self.router.pick()
        async with self._client().get(
            self._target(url, path), headers=self._with(authorization), allow_redirects=False
        ) as reply:
            if 300 <= reply.status < 400:
                return 502, _redirect(reply.status).body
            content = await read_bounded(reply, self.max_reply_bytes)
        if content is None:
            return 502, _too_large(self.max_reply_bytes).body
        return reply.status, content

    async def probe(self, timeout_s: float) -> list[tuple[bool, str]]:
        """Each upstream's `GET /models`: (answered below 500, what happened), in `urls` order, without URLs."""

        async def one(url: str) -> tuple[bool, str]:
            try:
                timeout = aiohttp.ClientTimeout(total=timeout_s)
                get = self._client().get(
                    self._target(url, "/models"), headers=self._headers, timeout=timeout, allow_redirects=False
                )
                async with get as response:
                    if 300 <= response.status < 400:  # chat would be refused too: not ready
                        return False, f"answered {response.status} (a redirect, not followed)"
                    return response.status < 500, f"answered {response.status}"
            except asyncio.TimeoutError:
                return False, f"no answer within {timeout_s:g}s"
            except aiohttp.ClientError as exc:
                return False, f"unreachable: {type(exc).__name__}"

        return list(await asyncio.gather(*(one(url) for url in self.urls)))

    async def post_json(self, path: str, body: bytes, *, authorization: str | None = None) -> JsonReply:
        """The whole reply, parsed; retried while it fails transiently or its body is unusable.
        `authorization`: the client's own header, sent instead of the server's key."""
        reply = await self._post(path, body, stream=False, headers=self._with(authorization))
        return cast(JsonReply, reply)  # a StreamReply comes only for streams

    async def post_stream(
        self, path: str, body: bytes, *, authorization: str | None = None
    ) -> StreamReply | JsonReply:
        """The SSE response to stream on, or the whole reply when the upstream ignored `stream` and answered
        JSON."""
        return await self._post(path, body, stream=True, headers=self._with(authorization))

    def _with(self, authorization: str | None) -> dict[str, str]:
        return self._headers if authorization is None else self._headers | {"authorization": authorization}

    async def _post(self, path: str, body: bytes, *, stream: bool, headers: dict[str, str]) -> StreamReply | JsonReply:
        async def attempt(number: int) -> StreamReply | JsonReply:
            try:
                reply = await self._attempt(self.router.pick(), path, body, stream, headers)
            except UpstreamFailure as failure:  # the request's own fault: retrying cannot help
                failure.attempts = number
                self.accounting.record_failure(TAG)
                raise
            reply.attempts = number
            return reply

        try:
            return await self.retry.run(attempt, self.accounting, TAG, self.on_retry)
        except RequestFailedError as exhausted:  # the last attempt's answer goes back (`raise ... from failure`)
            failure = cast(UpstreamFailure, getattr(exhausted.cause, "__cause__", None))
            failure.attempts = exhausted.attempts
            raise failure from None

    async def _attempt(
        self, url: str, path: str, body: bytes, stream: bool, headers: dict[str, str]
    ) -> StreamReply | JsonReply:
        try:
            response = await self._send(url, path, body, headers)
        except asyncio.TimeoutError:
            self.counters.timeouts += 1
            message = f"the upstream did not answer within {self._timeout_s:g}s"
            raise RequestTimeoutError(message) from _failure(504, message, "upstream_timeout")
        except aiohttp.ClientError as exc:
            message = f"upstream unreachable: {type(exc).__name__}"
            raise ConnectionFailedError(message) from _failure(502, message, "upstream_unreachable")
        if 300 <= response.status < 400:  # never followed: the library and messages go nowhere but `url`
            response.close()
            self._count(response.status)
            raise _redirect(response.status)
        if response.status >= 400:
            failure = await self._failure(response)
            error = map_status_error(response.status, failure.body[:500].decode(errors="replace"), response.headers)
            if not isinstance(error, TransientError):
                raise failure
            raise error from failure
        if stream and response.content_type == "text/event-stream":
            return StreamReply(response, url)
        return await self._whole(response, url)

    async def _whole(self, response: aiohttp.ClientResponse, url: str) -> JsonReply:
        """The 2xx body read and parsed; a bad body (broken off, not JSON, not a completion) is retryable."""
        content: bytes | None = b""
        try:
            content = await read_bounded(response, self.max_reply_bytes)
            data = json.loads(content) if content is not None else None
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, RecursionError):
            data = None
        finally:  # a body left unread holds its connection: closed, never back into the pool
            response.close() if content is None else response.release()
        if content is None:  # the request's own reply, whatever attempt: not retried
            raise _too_large(self.max_reply_bytes)
        if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
            message = f"the upstream answered {response.status} with a body that is not a chat.completion object"
            raise MalformedResponseError(message) from _failure(
                502, message + " (truncated or invalid JSON)", "bad_upstream_body"
            )
        return JsonReply(response.status, content, data, url)

    def record(self, *, prompt_tokens: int, completion_tokens: int, latency_s: float) -> None:
        self.accounting.record_call(
            TAG,
            samples=1,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost_usd=0.0,
            latency_s=latency_s,
        )

    def snapshot(self) -> dict[str, Any]:
        totals = self.accounting.snapshot()["total"]
        return totals | {
            "retries": sum(totals[f"retries_{cause}"] for cause in RETRY_CAUSES),
            "timeouts": self.counters.timeouts,
            "error_statuses": dict(self.counters.by_status),
        }

    async def _send(self, url: str, path: str, body: bytes, headers: dict[str, str]) -> aiohttp.ClientResponse:
        self.router.start(url)
        try:
            return await self._client().post(
                self._target(url, path), data=body, headers=headers, allow_redirects=False
            )
        finally:
            self.router.done(url)

    async def _failure(self, response: aiohttp.ClientResponse) -> UpstreamFailure:
        status, code = response.status, "upstream_error"
        body: bytes | None = b""
        try:
            body = await read_bounded(response, self.max_error_bytes)
        except (aiohttp.ClientError, asyncio.TimeoutError):
            body = error_bytes(502, f"upstream answered {status}", "upstream_error")
        finally:
            response.close() if body is None else response.release()
        if body is None:  # the status goes back; the body is ours, one line saying why
            code = "upstream_error_too_large"
            message = f"the upstream answered {status} with an error body over {self.max_error_bytes} bytes"
            body = error_bytes(status, message + " (max_error_bytes); it was not passed on", code)
        self._count(status)
        headers = {key.lower(): value for key, value in response.headers.items() if key.lower() == "retry-after"}
        return UpstreamFailure(status, body, headers, code=code)

    def _count(self, status: int) -> None:
        self.counters.by_status[status] = self.counters.by_status.get(status, 0) + 1

    def _target(self, url: str, path: str) -> URL:
        target = self._targets.get((url, path))
        if target is None:
            # the path goes before a query string the URL carries (an Azure Functions `code`: core.secrets)
            target = self._targets[(url, path)] = URL(url_with_path(url, path), encoded=True)
        return target

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("Upstream.open() was not awaited")
        return self._session


def _failure(status: int, message: str, code: str) -> UpstreamFailure:
    return UpstreamFailure(status, error_bytes(status, message, code), code=code)


def _redirect(status: int) -> UpstreamFailure:
    return _failure(
        502, f"the upstream answered {status} (a redirect); serve does not follow redirects", "upstream_redirect"
    )


def _too_large(limit: int) -> UpstreamFailure:
    message = f"the upstream's reply is over {limit} bytes (max_reply_bytes); it was not passed on"
    return _failure(502, message, "upstream_reply_too_large")


async def read_bounded(response: aiohttp.ClientResponse, limit: int) -> bytes | None:
    """The body, or None as soon as it passes `limit` bytes (never held past it; a Content-Length over it is
    refused before a byte is read)."""
    if response.content_length is not None and response.content_length > limit:
        return None
    parts, size = [], 0
    async for chunk in response.content.iter_any():
        size += len(chunk)
        if size > limit:
            return None
        parts.append(chunk)
    return b"".join(parts)
