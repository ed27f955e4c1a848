"""The shared client layer: cache, retries, concurrency, routing, accounting and budget."""

from __future__ import annotations

import asyncio

import pytest

from tfgrpo.llm.accounting import Pricing, resolve_pricing
from tfgrpo.llm.backends.scripted import ScriptedBackend
from tfgrpo.llm.cache import ResponseCache
from tfgrpo.llm.client import LLMClient
from tfgrpo.llm.errors import (
    BudgetExceededError,
    PermanentError,
    RateLimitError,
    RequestFailedError,
    ServerError,
)
from tfgrpo.llm.types import SamplingParams

MESSAGES = [{"role": "user", "content": "What is 2 + 2?"}]


def echo(request, index):
    return f"answer {index}"


def client_for(backend, **kwargs) -> LLMClient:
    kwargs.setdefault("backoff_initial_s", 0.001)
    kwargs.setdefault("backoff_max_s", 0.01)
    return LLMClient(backend, **kwargs)


async def test_second_identical_run_makes_zero_backend_calls(tmp_path):
    backend = ScriptedBackend(echo)
    cache_path = tmp_path / "cache.sqlite"
    first = client_for(backend, cache=ResponseCache(cache_path))
    out1 = await first.chat(MESSAGES, n=4, tag="rollout")
    assert [c.text for c in out1] == [f"answer {i}" for i in range(4)]
    assert backend.num_samples_served == 4

    # A new client over the same file (a resumed process) pays for nothing.
    second = client_for(backend, cache=ResponseCache(cache_path))
    out2 = await second.chat(MESSAGES, n=4, tag="rollout")
    assert [c.text for c in out2] == [c.text for c in out1]
    assert backend.num_samples_served == 4
    assert all(c.cached and c.cost_usd == 0 for c in out2)
    assert [c.usage for c in out2] == [c.usage for c in out1]  # token counts describe the text, kept
    assert second.accounting.total.cached_samples == 4
    assert second.accounting.total.calls == 0
    assert second.accounting.total.completion_tokens == 0  # nothing paid in this run


async def test_partly_cached_group_asks_only_for_missing_samples(tmp_path):
    backend = ScriptedBackend(echo)
    client = client_for(backend, cache=ResponseCache(tmp_path / "c.sqlite"))
    await client.chat(MESSAGES, n=2)  # samples 0, 1
    out = await client.chat(MESSAGES, n=5)  # samples 0..4: only 2, 3, 4 are new
    assert [c.text for c in out] == [f"answer {i}" for i in range(5)]
    assert backend.calls[-1].sample_offset == 2 and backend.calls[-1].n == 3


async def test_cache_key_separates_sampling_and_messages(tmp_path):
    backend = ScriptedBackend(lambda r, i: f"{r.sampling.temperature}:{r.messages[-1].content}")
    client = client_for(backend, cache=ResponseCache(tmp_path / "c.sqlite"))
    a = await client.chat(MESSAGES, sampling=SamplingParams(temperature=0.0))
    b = await client.chat(MESSAGES, sampling=SamplingParams(temperature=0.7))
    c = await client.chat([{"role": "user", "content": "other"}], sampling=SamplingParams(temperature=0.0))
    assert len({a[0].text, b[0].text, c[0].text}) == 3
    assert backend.num_samples_served == 3


async def test_rate_limit_is_retried_honouring_retry_after():
    attempts = []

    def flaky(request, index):
        attempts.append(index)
        if len(attempts) <= 2:
            return RateLimitError("429 slow down", retry_after=0.05)
        return "ok"

    client = client_for(ScriptedBackend(flaky), max_retries=3)
    loop = asyncio.get_running_loop()
    start = loop.time()
    out = await client.chat(MESSAGES)
    assert out[0].text == "ok"
    assert len(attempts) == 3
    assert loop.time() - start >= 0.1  # two waits of Retry-After, not the 1 ms backoff


async def test_request_fails_with_typed_error_after_retries():
    backend = ScriptedBackend(lambda r, i: ServerError("502 bad gateway", status=502))
    client = client_for(backend, max_retries=2)
    with pytest.raises(RequestFailedError) as info:
        await client.chat(MESSAGES, tag="rollout")
    assert info.value.attempts == 3
    assert isinstance(info.value.cause, ServerError)
    assert len(backend.calls) == 3
    assert client.accounting.by_tag["rollout"].failed_calls == 1


async def test_permanent_error_is_not_retried():
    backend = ScriptedBackend(lambda r, i: PermanentError("401 bad key"))
    client = client_for(backend, max_retries=5)
    with pytest.raises(PermanentError):
        await client.chat(MESSAGES)
    assert len(backend.calls) == 1


async def test_timeout_is_a_retried_transient_error():
    backend = ScriptedBackend(echo, latency_s=0.5)
    client = client_for(backend, max_retries=1, timeout_s=0.05)
    with pytest.raises(RequestFailedError, match="RequestTimeoutError"):
        await client.chat(MESSAGES)
    assert len(backend.calls) == 2


async def test_concurrency_is_bounded_per_endpoint():
    in_flight = 0
    peak = 0

    class Tracking(ScriptedBackend):
        async def forward(self, request):
            nonlocal in_flight, peak
            in_flight += 1
            peak = max(peak, in_flight)
            try:
                await asyncio.sleep(0.01)
                return await super().forward(request)
            finally:
                in_flight -= 1

    client = client_for(Tracking(echo), concurrency=3)
    await asyncio.gather(*(client.chat([{"role": "user", "content": str(i)}]) for i in range(20)))
    assert peak == 3


async def test_least_busy_routing_spreads_over_replicas():
    a = ScriptedBackend(echo, endpoint="http://a", latency_s=0.01)
    b = ScriptedBackend(echo, endpoint="http://b", latency_s=0.01)
    client = client_for([a, b], concurrency=4)
    await asyncio.gather(*(client.chat([{"role": "user", "content": str(i)}]) for i in range(16)))
    assert len(a.calls) == 8 and len(b.calls) == 8


async def test_accounting_counts_tokens_and_cost_per_tag():
    client = client_for(ScriptedBackend(lambda r, i: "one two three"), pricing=Pricing(1_000_000, 2_000_000))
    await client.chat([{"role": "user", "content": "a b"}], n=2, tag="rollout")
    await client.chat([{"role": "user", "content": "c"}], tag="summary")
    rollout = client.accounting.by_tag["rollout"]
    assert (rollout.prompt_tokens, rollout.completion_tokens, rollout.samples) == (2, 6, 2)
    assert rollout.cost_usd == pytest.approx(2 * 1 + 6 * 2)
    assert client.accounting.total.completion_tokens == 9
    assert client.accounting.snapshot()["by_tag"]["summary"]["calls"] == 1


async def test_budget_cap_stops_the_run():
    backend = ScriptedBackend(lambda r, i: "word " * 10)
    client = client_for(backend, pricing=Pricing(0.0, 100_000.0), budget_usd=2.5)  # $1 per call
    for _ in range(3):
        await client.chat([{"role": "user", "content": str(_)}])
    with pytest.raises(BudgetExceededError):
        await client.chat([{"role": "user", "content": "one more"}])
    assert len(backend.calls) == 3


def test_pricing_from_litellm_table_and_local_is_free():
    assert resolve_pricing("gpt-4o-mini", None, None, local=False).input_per_1m > 0
    assert resolve_pricing("openai/gpt-4o-mini", None, None, local=False).known
    assert resolve_pricing("my-own-vllm-model", None, None, local=False).known is False
    assert resolve_pricing("anything", None, None, local=True).cost(1000, 1000) == 0
    assert resolve_pricing("x", 3.0, None, local=False).cost(1_000_000, 5) == pytest.approx(3.0)


async def test_identical_requests_in_flight_are_paid_once():
    backend = ScriptedBackend(echo, latency_s=0.05)
    client = client_for(backend)
    results = await asyncio.gather(*(client.chat(MESSAGES, n=2, tag="summary") for _ in range(5)))
    assert backend.num_samples_served == 2
    assert all([c.text for c in r] == ["answer 0", "answer 1"] for r in results)
    assert sum(not c.cached for r in results for c in r) == 2
    assert client.accounting.by_tag["summary"].cached_samples == 8


async def test_a_shared_failure_reaches_every_waiter():
    backend = ScriptedBackend(lambda r, i: PermanentError("bad request"), latency_s=0.02)
    client = client_for(backend)
    outcomes = await asyncio.gather(*(client.chat(MESSAGES) for _ in range(3)), return_exceptions=True)
    assert all(isinstance(o, PermanentError) for o in outcomes)
    assert len(backend.calls) == 1


async def test_backoff_without_retry_after_grows_exponentially():
    stamps = []

    def failing_twice(request, index):
        stamps.append(asyncio.get_running_loop().time())
        return ServerError("503", status=503) if len(stamps) <= 2 else "ok"

    client = LLMClient(ScriptedBackend(failing_twice), max_retries=2, backoff_initial_s=0.02, backoff_max_s=0.05)
    out = await client.chat(MESSAGES)
    assert out[0].text == "ok"
    gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    assert gaps[0] >= 0.02 and gaps[1] >= 0.04  # initial, then doubled (plus jitter, capped at the max)


@pytest.mark.parametrize("timeout_context", [True, False], ids=["asyncio.timeout", "wait_for"])
async def test_timeout_either_way(monkeypatch, timeout_context):
    """Python 3.11+ bounds a call with asyncio.timeout; 3.10 falls back to asyncio.wait_for."""
    import tfgrpo.llm.client as client_module

    if not timeout_context:
        monkeypatch.setattr(client_module, "_timeout", None)
    backend = ScriptedBackend(echo, latency_s=0.5)
    client = client_for(backend, max_retries=0, timeout_s=0.05)
    with pytest.raises(RequestFailedError, match="RequestTimeoutError"):
        await client.chat(MESSAGES)


async def test_the_backends_completion_objects_are_not_modified(tmp_path):
    from tfgrpo.llm.types import Completion, Usage

    shared = Completion(text="same", usage=Usage(prompt_tokens=4, completion_tokens=6))
    client = client_for(
        ScriptedBackend(lambda r, i: shared),
        pricing=Pricing(1_000_000, 1_000_000),
        cache=ResponseCache(tmp_path / "c.sqlite"),
    )
    out = await client.chat(MESSAGES, n=3, sample_offset=2)
    assert [c.index for c in out] == [2, 3, 4]
    assert all(c.cost_usd == pytest.approx(10.0) and not c.cached for c in out)
    assert (shared.index, shared.cost_usd, shared.cached) == (0, 0.0, False)
    assert len(client.cache) == 3


async def test_samples_are_durable_when_chat_returns(tmp_path):
    """Every sample is committed before `chat` returns it: another connection (a resumed process)
    sees all of them at once, so a crash right after a call never makes it paid twice."""
    import sqlite3

    path = tmp_path / "c.sqlite"
    client = client_for(ScriptedBackend(echo), cache=ResponseCache(path))
    await client.chat(MESSAGES, n=4)
    with sqlite3.connect(path) as other:
        assert other.execute("SELECT COUNT(*) FROM completions").fetchone()[0] == 4
