"""Forwarding to the upstream server(s): the raw OpenAI request body in, the raw reply (or SSE stream) out.

Why not `LLMClient.chat`: a proxy must pass every field it does not understand (tools, response_format,
logprobs, stream_options, ...) and stream bytes as they come, while `ChatRequest` is a typed subset and
returns whole completions. So the bytes go through one pooled aiohttp session (measured: httpx's pool
added ~1 s at 64 concurrent requests on 2 cores, aiohttp a few ms; benchmarks/serve.py), and the client
layer's policy is reused piece by piece: its error classification (`map_status_error`: what is
transient), its Retry-After parsing, tenacity's exponential backoff with jitter, least-busy routing
over replicas, and its `Accounting` for calls, tokens, latency and failures. A request is retried only
before any byte reached the client (a 429/5xx/timeout/refused connection); then the last status goes
back unchanged.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from tenacity import RetryCallState, wait_exponential_jitter

from tfgrpo.llm.accounting import Accounting
from tfgrpo.llm.backends.errors_map import map_status_error, parse_retry_after
from tfgrpo.llm.errors import TransientError

TAG = "serve"


@dataclass
class UpstreamFailure(Exception):
    """The upstream's final answer was an error: `status` and `body` go back to the client as they are."""

    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    attempts: int = 1

    def __str__(self) -> str:
        return f"upstream answered {self.status} after {self.attempts} attempt(s)"


@dataclass
class RetryCounters:
    retries: int = 0
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
    ):
        self.urls = urls
        self.accounting = Accounting()
        self.counters = RetryCounters()
        self._headers = {"content-type": "application/json"} | (
            {"authorization": f"Bearer {api_key}"} if api_key else {}
        )
        self._timeout_s = timeout_s
        self._max_retries = max_retries
        self._backoff = wait_exponential_jitter(initial=backoff_s, max=max(backoff_s, 10.0)) if backoff_s > 0 else None
        self._retry_after_max_s = retry_after_max_s
        self._in_flight = {url: 0 for url in urls}
        self._session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        # No total deadline (a stream may run long); a timeout is `timeout_s` without a byte from the upstream.
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self._timeout_s, sock_read=self._timeout_s)
        self._session = aiohttp.ClientSession(
            timeout=timeout, connector=aiohttp.TCPConnector(limit=0), auto_decompress=False
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def get(self, path: str) -> tuple[int, bytes]:
        url = min(self.urls, key=self._in_flight.__getitem__)
        async with self._client().get(url + path, headers=self._headers) as response:
            return response.status, await response.read()

    async def post(self, path: str, body: bytes) -> tuple[aiohttp.ClientResponse, str]:
        """A 2xx response, its body not read yet (the caller reads or streams it, then releases it), and its URL."""
        attempts = 0
        while True:
            attempts += 1
            url = min(self.urls, key=self._in_flight.__getitem__)
            retry_after = None
            try:
                response = await self._send(url, path, body)
            except asyncio.TimeoutError:
                self.counters.timeouts += 1
                failure = UpstreamFailure(
                    504, _error_body(f"upstream {url} did not answer within {self._timeout_s:g}s", "timeout")
                )
            except aiohttp.ClientError as exc:
                failure = UpstreamFailure(
                    502, _error_body(f"upstream {url} unreachable: {type(exc).__name__}", "upstream_unreachable")
                )
            else:
                if response.status < 400:
                    return response, url
                failure = await self._failure(response)
                error = map_status_error(
                    response.status, failure.body[:500].decode(errors="replace"), response.headers
                )
                if not isinstance(error, TransientError):  # the request's own fault: retrying cannot help
                    failure.attempts = attempts
                    self.accounting.record_failure(TAG)
                    raise failure
                retry_after = parse_retry_after(response.headers)
            failure.attempts = attempts
            if attempts > self._max_retries:
                self.accounting.record_failure(TAG)
                raise failure
            self.counters.retries += 1
            await asyncio.sleep(self._delay(retry_after, attempts))

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
            "retries": self.counters.retries,
            "timeouts": self.counters.timeouts,
            "error_statuses": dict(self.counters.by_status),
        }

    async def _send(self, url: str, path: str, body: bytes) -> aiohttp.ClientResponse:
        self._in_flight[url] += 1
        try:
            return await self._client().post(url + path, data=body, headers=self._headers)
        finally:
            self._in_flight[url] -= 1

    async def _failure(self, response: aiohttp.ClientResponse) -> UpstreamFailure:
        try:
            body = await response.read()
        except (aiohttp.ClientError, asyncio.TimeoutError):
            body = _error_body(f"upstream answered {response.status}", "upstream_error")
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

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("Upstream.open() was not awaited")
        return self._session


def _error_body(message: str, kind: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": kind}}).encode()
