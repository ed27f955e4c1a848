"""Forwarding to the upstream server(s): the raw OpenAI request body in, the raw reply (or SSE stream) out.

Why not `LLMClient.chat`: a proxy must pass every field it does not understand (tools, response_format,
logprobs, stream_options, ...) and stream bytes as they come, while `ChatRequest` is a typed subset and
returns whole completions. So the bytes go through one pooled aiohttp session (measured: httpx's pool
added ~1 s at 64 concurrent requests on 2 cores, aiohttp a few ms; benchmarks/serve.py), and the client
layer's policy is reused piece by piece: its error classification (`map_status_error`: what is
transient), its Retry-After parsing, tenacity's exponential backoff with jitter, least-busy routing
over replicas, and its `Accounting` for calls, tokens, latency, failures and retries by cause. A request
is retried only before any byte reached the client (a 429/5xx/timeout/refused connection, or a 2xx whose
body is not a chat.completion object: truncated, invalid JSON); then the last status goes back unchanged,
except a bad body, which becomes a 502 (a client must never get a 200 it cannot parse).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import aiohttp
from tenacity import RetryCallState, wait_exponential_jitter
from yarl import URL

from tfgrpo.llm.accounting import RETRY_CAUSES, Accounting
from tfgrpo.llm.backends.errors_map import map_status_error, parse_retry_after
from tfgrpo.llm.errors import TransientError
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
class _Retryable(Exception):
    failure: UpstreamFailure
    cause: str  # one of the client layer's RETRY_CAUSES
    retry_after: float | None = None


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
        retry_after_max_s: float = 60.0,
        on_retry: Callable[[str], None] | None = None,
    ):
        """`on_retry(cause)`: called for each attempt retried (serve counts them)."""
        self.urls = urls
        self.accounting = Accounting()
        self.counters = RetryCounters()
        self.on_retry = on_retry
        self._headers = {"content-type": "application/json"} | (
            {"authorization": f"Bearer {api_key}"} if api_key else {}
        )
        self._timeout_s = timeout_s
        self._max_retries = max_retries
        self._backoff = (
            wait_exponential_jitter(multiplier=backoff_s, max=max(backoff_s, 10.0)) if backoff_s > 0 else None
        )
        self._retry_after_max_s = retry_after_max_s
        self._in_flight = {url: 0 for url in urls}
        self._targets: dict[tuple[str, str], URL] = {}  # parsed once: yarl parses a str URL on every request
        self._session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        # No total deadline (a stream may run long); a timeout is `timeout_s` without a byte from the upstream.
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self._timeout_s, sock_read=self._timeout_s)
        # No cookie jar: a proxy must not keep one client's Set-Cookie for the next (and skipping it saves
        # ~15% of aiohttp's CPU per request, measured).
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
        url = min(self.urls, key=self._in_flight.__getitem__)
        async with self._client().get(url + path, headers=self._with(authorization)) as response:
            return response.status, await response.read()

    async def probe(self, timeout_s: float) -> list[tuple[bool, str]]:
        """Each upstream's `GET /models`: (answered below 500, what happened), in `urls` order, without URLs."""

        async def one(url: str) -> tuple[bool, str]:
            try:
                timeout = aiohttp.ClientTimeout(total=timeout_s)
                async with self._client().get(url + "/models", headers=self._headers, timeout=timeout) as response:
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
        attempts = 0
        while True:
            attempts += 1
            try:
                url = min(self.urls, key=self._in_flight.__getitem__)
                reply = await self._attempt(url, path, body, stream, headers)
                reply.attempts = attempts
                return reply
            except UpstreamFailure as failure:  # the request's own fault: retrying cannot help
                failure.attempts = attempts
                self.accounting.record_failure(TAG)
                raise
            except _Retryable as retryable:
                retryable.failure.attempts = attempts
                if attempts > self._max_retries:
                    self.accounting.record_failure(TAG)
                    raise retryable.failure from None
                self.accounting.record_retry(TAG, retryable.cause)
                if self.on_retry is not None:
                    self.on_retry(retryable.cause)
                await asyncio.sleep(self._delay(retryable.retry_after, attempts))

    async def _attempt(
        self, url: str, path: str, body: bytes, stream: bool, headers: dict[str, str]
    ) -> StreamReply | JsonReply:
        try:
            response = await self._send(url, path, body, headers)
        except asyncio.TimeoutError:
            self.counters.timeouts += 1
            message = f"the upstream did not answer within {self._timeout_s:g}s"
            raise _Retryable(_failure(504, message, "upstream_timeout"), "timeout") from None
        except aiohttp.ClientError as exc:
            message = f"upstream unreachable: {type(exc).__name__}"
            raise _Retryable(_failure(502, message, "upstream_unreachable"), "connection") from None
        if response.status >= 400:
            failure = await self._failure(response)
            error = map_status_error(response.status, failure.body[:500].decode(errors="replace"), response.headers)
            if not isinstance(error, TransientError):
                raise failure
            cause = "rate_limit" if response.status == 429 else "server_error"
            raise _Retryable(failure, cause, parse_retry_after(response.headers))
        if stream and response.content_type == "text/event-stream":
            return StreamReply(response, url)
        return await self._whole(response, url)

    async def _whole(self, response: aiohttp.ClientResponse, url: str) -> JsonReply:
        """The 2xx body read and parsed; a bad body (broken off, not JSON, not a completion) is retryable."""
        try:
            content = await response.read()
            data = json.loads(content)
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, RecursionError):
            data = None
        finally:
            response.release()
        if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
            message = f"the upstream answered {response.status} with a body that is not a chat.completion object"
            raise _Retryable(_failure(502, message + " (truncated or invalid JSON)", "bad_upstream_body"), "bad_body")
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
        self._in_flight[url] += 1
        try:
            return await self._client().post(self._target(url, path), data=body, headers=headers)
        finally:
            self._in_flight[url] -= 1

    async def _failure(self, response: aiohttp.ClientResponse) -> UpstreamFailure:
        try:
            body = await response.read()
        except (aiohttp.ClientError, asyncio.TimeoutError):
            body = error_bytes(502, f"upstream answered {response.status}", "upstream_error")
        finally:
            response.release()
        self.counters.by_status[response.status] = self.counters.by_status.get(response.status, 0) + 1
        headers = {key.lower(): value for key, value in response.headers.items() if key.lower() == "retry-after"}
        return UpstreamFailure(response.status, body, headers)

    def _delay(self, retry_after: float | None, attempt: int) -> float:
        if retry_after is not None:
            return min(retry_after, self._retry_after_max_s)
        if self._backoff is None:
            return 0.0
        state = RetryCallState(retry_object=None, fn=None, args=(), kwargs={})  # type: ignore[arg-type]
        state.attempt_number = attempt
        return self._backoff(state)

    def _target(self, url: str, path: str) -> URL:
        target = self._targets.get((url, path))
        if target is None:
            target = self._targets[(url, path)] = URL(url + path)
        return target

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("Upstream.open() was not awaited")
        return self._session


def _failure(status: int, message: str, code: str) -> UpstreamFailure:
    return UpstreamFailure(status, error_bytes(status, message, code), code=code)
