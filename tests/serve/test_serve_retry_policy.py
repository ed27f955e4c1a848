"""serve's HTTP passthrough and the client layer retry by ONE policy (`tfgrpo.llm.retry`): the same
classification of what is transient, the same Retry-After cap, the same count of attempts, against one
real scripted upstream on 127.0.0.1."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.helpers.serve_fixtures import proxy
from tests.helpers.serve_upstream import Fault, ScriptedUpstream
from tfgrpo.llm.backends.openai_backend import OpenAIBackend
from tfgrpo.llm.client import LLMClient
from tfgrpo.llm.errors import RequestFailedError, TransientError
from tfgrpo.llm.retry import RetryPolicy

QUESTION = [{"role": "user", "content": "What is 2+2?"}]


@pytest.fixture
def waits(monkeypatch) -> list[float]:
    """Every wait the shared policy decides (serve's and the client's alike), not slept."""
    decided: list[float] = []
    decide = RetryPolicy.delay

    def record(self: RetryPolicy, error: TransientError, attempt: int) -> float:
        decided.append(decide(self, error, attempt))
        return 0.0

    monkeypatch.setattr(RetryPolicy, "delay", record)
    return decided


def _client_chat(base_url: str, max_retries: int) -> LLMClient:
    client = LLMClient(OpenAIBackend("m", base_url=base_url), max_retries=max_retries)

    async def once() -> None:
        try:
            await client.chat(QUESTION)
        finally:
            await client.aclose()

    try:
        asyncio.run(once())
    except RequestFailedError as failed:
        client.accounting.record_cached("attempts", failed.attempts)  # kept for the caller to read
    return client


def test_serve_and_the_client_cap_retry_after_and_classify_statuses_alike(tmp_path, waits):
    upstream = ScriptedUpstream()
    with proxy(tmp_path, upstream, max_retries=2) as p:
        base_url = p.state.upstream.urls[0]
        for ask in ("serve", "client"):
            upstream.push(Fault(429, {"retry-after": "86400"}), Fault(408))  # a day's wait asked, then a 408
            if ask == "serve":
                response = httpx.post(p.url + "/v1/chat/completions", json={"model": "m", "messages": QUESTION})
                assert response.status_code == 200 and len(upstream.bodies) == 3
                counted = httpx.get(p.url + "/health").json()["upstream_calls"]
            else:
                counted = _client_chat(base_url, max_retries=2).accounting.snapshot()["total"]
            assert (counted["retries_rate_limit"], counted["retries_timeout"], counted["retries_server_error"]) == (
                1,
                1,
                0,
            )
        cap = RetryPolicy().retry_after_max_s
        assert cap < 86400 and p.state.upstream.retry.retry_after_max_s == cap
        assert waits.count(cap) == 2  # the 429's capped wait, serve's then the client's


def test_serve_gives_up_after_as_many_attempts_as_the_client(tmp_path, waits):
    upstream = ScriptedUpstream()
    with proxy(tmp_path, upstream, max_retries=3) as p:
        upstream.push(*[Fault(503)] * 4)
        response = httpx.post(p.url + "/v1/chat/completions", json={"model": "m", "messages": QUESTION})
        assert response.status_code == 503 and response.headers["x-tfgrpo-attempts"] == "4"
        upstream.push(*[Fault(503)] * 4)
        client = _client_chat(p.state.upstream.urls[0], max_retries=p.state.upstream.retry.max_retries)
        totals = client.accounting.snapshot()["total"]
        assert totals["retries_server_error"] == 3 and totals["failed_calls"] == 1
        assert len(upstream.bodies) == 8 and len(waits) == 6
