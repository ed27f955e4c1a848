"""LiteLLMBackend (`openai/<name>` + api_base) against a real llama.cpp server on SmolLM2, and the
mapping of litellm's exceptions to our typed errors through a scripted fault server."""

from __future__ import annotations

import pytest

from tests.helpers.servers import FaultServer, Reply, ask
from tfgrpo.llm.backends.litellm_backend import LiteLLMBackend
from tfgrpo.llm.errors import (
    ContextWindowExceededError,
    MalformedResponseError,
    PermanentError,
    RateLimitError,
    RequestTimeoutError,
    ServerError,
    TransientError,
)
from tfgrpo.llm.types import SamplingParams

pytestmark = pytest.mark.timeout(120)


async def test_llama_server_through_litellm(llama_url):
    backend = LiteLLMBackend("openai/smollm2", api_base=llama_url, api_key="sk-local")
    try:
        [completion] = await backend.forward(ask(sampling=SamplingParams(temperature=0.0, max_tokens=16)))
    finally:
        await backend.aclose()
    assert completion.text.strip()
    assert completion.usage.prompt_tokens > 10
    assert 0 < completion.usage.completion_tokens <= 16
    assert backend.endpoint == llama_url
    assert backend.model_name == "openai/smollm2"


async def test_llama_server_n_samples_through_litellm(llama_url):
    backend = LiteLLMBackend("openai/smollm2", api_base=llama_url, api_key="sk-local")
    try:
        completions = await backend.forward(ask(n=2, sampling=SamplingParams(temperature=1.0, max_tokens=10, seed=3)))
    finally:
        await backend.aclose()
    assert len(completions) == 2
    assert [c.index for c in completions] == [0, 1]
    assert all(c.text for c in completions)
    assert backend.ignores_n  # llama.cpp's server answered one choice: the backend fanned out


async def test_sampling_reaches_the_server(fault_server):
    fault_server.push(Reply(text="ok"))
    backend = LiteLLMBackend("openai/fake", api_base=fault_server.base_url, api_key="sk-test")
    sampling = SamplingParams(temperature=0.2, top_p=0.5, max_tokens=33, stop=["END"], seed=9)
    [completion] = await backend.forward(ask(sampling=sampling))
    sent = fault_server.requests[0].body
    assert sent["model"] == "fake"
    assert (sent["temperature"], sent["top_p"], sent["max_tokens"], sent["stop"], sent["seed"]) == (
        0.2,
        0.5,
        33,
        ["END"],
        9,
    )
    assert completion.text == "ok 0 seed=9"
    assert completion.usage.prompt_tokens == 10 and completion.usage.completion_tokens == 3


async def forward_one(server: FaultServer, *replies: Reply, timeout_s: float = 5.0):
    server.push(*replies)
    backend = LiteLLMBackend("openai/fake", api_base=server.base_url, api_key="sk-test", timeout_s=timeout_s)
    return await backend.forward(ask())


async def test_429_is_rate_limit_with_retry_after(fault_server):
    with pytest.raises(RateLimitError) as caught:
        await forward_one(fault_server, Reply(status=429, headers={"Retry-After": "4"}))
    assert caught.value.retry_after == 4.0


@pytest.mark.parametrize("status", [500, 503])
async def test_5xx_is_server_error(fault_server, status):
    with pytest.raises(ServerError):
        await forward_one(fault_server, Reply(status=status))


async def test_slow_reply_is_timeout(fault_server):
    with pytest.raises(RequestTimeoutError):
        await forward_one(fault_server, Reply(delay_s=2.0), timeout_s=0.3)


@pytest.mark.parametrize("body", ["not json {", {"foo": 1}], ids=["not-json", "no-choices"])
async def test_malformed_body(fault_server, body):
    with pytest.raises(MalformedResponseError):
        await forward_one(fault_server, Reply(body=body))


async def test_context_window(fault_server):
    body = {"error": {"message": "This model's maximum context length is 2048 tokens."}}
    with pytest.raises(ContextWindowExceededError):
        await forward_one(fault_server, Reply(status=400, body=body))


@pytest.mark.parametrize("status", [401, 404])
async def test_auth_and_not_found_are_permanent(fault_server, status):
    with pytest.raises(PermanentError) as caught:
        await forward_one(fault_server, Reply(status=status))
    assert not isinstance(caught.value, TransientError)


async def test_missing_api_key_is_permanent_with_a_hint(fault_server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    backend = LiteLLMBackend("openai/fake", api_base=fault_server.base_url)
    with pytest.raises(PermanentError, match="--api-key"):
        await backend.forward(ask())
    assert fault_server.requests == []
