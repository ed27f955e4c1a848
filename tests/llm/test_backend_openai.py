"""OpenAIBackend against a real llama.cpp server on SmolLM2, and against a scripted fault server.

The client layer's retry loop is tested in test_llm_client.py; here each server failure must surface as
the right typed error (with `retry_after` from the headers), and servers that ignore `n` must still
yield n samples.
"""

from __future__ import annotations

import email.utils
import time

import pytest

from tests.helpers.servers import FaultServer, Reply, ask, free_port
from tfgrpo.llm.backends.openai_backend import OpenAIBackend
from tfgrpo.llm.client import LLMClient
from tfgrpo.llm.errors import (
    BackendUnavailableError,
    ConnectionFailedError,
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


# -- the real server ---------------------------------------------------------------------------------


async def test_llama_server_answers_with_text_and_usage(llama_url):
    backend = OpenAIBackend("smollm2", base_url=llama_url)
    try:
        [completion] = await backend.forward(ask(sampling=SamplingParams(temperature=0.0, max_tokens=16)))
    finally:
        await backend.aclose()
    assert isinstance(completion.text, str) and completion.text.strip()
    assert completion.finish_reason in {"stop", "length"}
    assert completion.usage.prompt_tokens > 10
    assert 0 < completion.usage.completion_tokens <= 16
    assert backend.endpoint == llama_url


async def test_llama_server_ignores_n_so_backend_fans_out_with_distinct_seeds(llama_url):
    backend = OpenAIBackend("smollm2", base_url=llama_url)
    request = ask(n=3, sample_offset=5, sampling=SamplingParams(temperature=1.0, max_tokens=12, seed=11))
    try:
        first = await backend.forward(request)
        again = await backend.forward(request)
    finally:
        await backend.aclose()
    assert backend.ignores_n, "llama.cpp's server answers one choice whatever n is"
    assert [c.index for c in first] == [5, 6, 7]
    assert len({c.text for c in first}) >= 2, "seed + sample index must give different samples"
    assert [c.text for c in again] == [c.text for c in first], "seeded samples reproduce"
    assert all(c.usage.completion_tokens > 0 for c in first)


async def test_llama_server_stop_strings(llama_url):
    backend = OpenAIBackend("smollm2", base_url=llama_url)
    try:
        [completion] = await backend.forward(
            ask(
                "List three colours, separated by commas.",
                sampling=SamplingParams(temperature=0.0, max_tokens=40, stop=[","]),
            )
        )
    finally:
        await backend.aclose()
    assert "," not in completion.text
    assert completion.finish_reason == "stop"


async def test_llama_server_context_window_is_a_permanent_typed_error(llama_url):
    backend = OpenAIBackend("smollm2", base_url=llama_url)
    try:
        with pytest.raises(ContextWindowExceededError):
            await backend.forward(ask("word " * 1500, sampling=SamplingParams(max_tokens=8)))
    finally:
        await backend.aclose()


# -- scripted faults ---------------------------------------------------------------------------------


async def forward_one(server: FaultServer, *replies: Reply, timeout_s: float = 5.0, **fields):
    server.push(*replies)
    backend = OpenAIBackend("fake-model", base_url=server.base_url, api_key="sk-test", timeout_s=timeout_s)
    try:
        return await backend.forward(ask(**fields))
    finally:
        await backend.aclose()


@pytest.mark.parametrize(
    ("headers", "expected"),
    [({"Retry-After": "7"}, 7.0), ({"retry-after-ms": "1500"}, 1.5), ({}, None)],
)
async def test_429_is_rate_limit_with_retry_after(fault_server, headers, expected):
    with pytest.raises(RateLimitError) as caught:
        await forward_one(fault_server, Reply(status=429, headers=headers))
    assert caught.value.retry_after == expected
    assert caught.value.status == 429


async def test_429_retry_after_as_http_date(fault_server):
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    with pytest.raises(RateLimitError) as caught:
        await forward_one(fault_server, Reply(status=429, headers={"Retry-After": when}))
    assert 20 <= caught.value.retry_after <= 31


@pytest.mark.parametrize("status", [500, 502, 503])
async def test_5xx_is_server_error(fault_server, status):
    with pytest.raises(ServerError) as caught:
        await forward_one(fault_server, Reply(status=status))
    assert caught.value.status == status


async def test_slow_reply_is_timeout(fault_server):
    with pytest.raises(RequestTimeoutError):
        await forward_one(fault_server, Reply(delay_s=2.0), timeout_s=0.3)


@pytest.mark.parametrize(
    "body",
    ["this is not json {", {"id": "x", "object": "chat.completion"}, {"choices": []}, {"choices": [{"index": 0}]}],
    ids=["not-json", "no-choices", "empty-choices", "choice-without-message"],
)
async def test_malformed_body_is_malformed_response(fault_server, body):
    with pytest.raises(MalformedResponseError):
        await forward_one(fault_server, Reply(body=body))


async def test_400_context_length_is_context_window_error(fault_server):
    body = {
        "error": {"message": "This model's maximum context length is 8192 tokens.", "code": "context_length_exceeded"}
    }
    with pytest.raises(ContextWindowExceededError):
        await forward_one(fault_server, Reply(status=400, body=body))


@pytest.mark.parametrize("status", [400, 401, 403, 404])
async def test_client_errors_are_permanent(fault_server, status):
    with pytest.raises(PermanentError) as caught:
        await forward_one(fault_server, Reply(status=status))
    assert not isinstance(caught.value, TransientError)


async def test_unreachable_server_is_connection_error():
    backend = OpenAIBackend("fake-model", base_url=f"http://127.0.0.1:{free_port()}/v1", timeout_s=5)
    try:
        with pytest.raises(ConnectionFailedError):
            await backend.forward(ask())
    finally:
        await backend.aclose()


async def test_native_n_splits_usage_over_choices(fault_server):
    completions = await forward_one(fault_server, n=3, sample_offset=2)
    assert [c.index for c in completions] == [2, 3, 4]
    assert [c.text for c in completions] == ["scripted reply 0", "scripted reply 1", "scripted reply 2"]
    # the server reported 10 prompt + 9 completion tokens for the whole request
    assert sum(c.usage.prompt_tokens for c in completions) == 10
    assert [c.usage.completion_tokens for c in completions] == [3, 3, 3]
    assert fault_server.requests[0].body["n"] == 3
    assert len(fault_server.requests) == 1


async def test_n_ignored_falls_back_to_parallel_singles_and_remembers(fault_server):
    fault_server.default = Reply(ignore_n=True)
    backend = OpenAIBackend("fake-model", base_url=fault_server.base_url, api_key="sk-test")
    request = ask(n=4, sampling=SamplingParams(seed=100))
    try:
        first = await backend.forward(request)
        assert len(first) == 4
        assert backend.ignores_n
        assert len(fault_server.requests) == 4  # one n=4 call answered with 1 choice, then 3 singles
        assert fault_server.requests[0].body["n"] == 4
        assert all("n" not in r.body for r in fault_server.requests[1:])
        assert fault_server.requests[0].body["seed"] == 100
        seeds = sorted(r.body["seed"] for r in fault_server.requests[1:])
        assert seeds == [101, 102, 103]
        assert [c.text for c in first] == [f"scripted reply 0 seed={s}" for s in (100, 101, 102, 103)]

        second = await backend.forward(request)  # now straight to 4 singles
        assert len(second) == 4
        assert len(fault_server.requests) == 8
        assert all("n" not in r.body for r in fault_server.requests[4:])
    finally:
        await backend.aclose()


async def test_sampling_stop_seed_and_tools_reach_the_server(fault_server):
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}]
    reply_body = {
        "id": "c",
        "object": "chat.completion",
        "created": 0,
        "model": "fake-model",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
    }
    sampling = SamplingParams(temperature=0.3, top_p=0.9, max_tokens=77, stop=["\n\n"], seed=5)
    [completion] = await forward_one(
        fault_server, Reply(body=reply_body), sampling=sampling, tools=tools, sample_offset=2
    )
    sent = fault_server.requests[0].body
    assert sent["model"] == "fake-model"
    assert sent["temperature"] == 0.3 and sent["top_p"] == 0.9 and sent["max_tokens"] == 77
    assert sent["stop"] == ["\n\n"]
    assert sent["seed"] == 7  # seed + absolute sample index
    assert sent["tools"] == tools
    assert completion.text == ""
    assert completion.finish_reason == "tool_calls"
    assert completion.tool_calls[0]["function"]["name"] == "add"


async def test_raw_reply_is_read_like_the_sdk_object(fault_server):
    """The backend posts through the SDK's raw `client.post` and reads the JSON itself: the key goes as a
    bearer token, `extra_body` is merged into the body (as the SDK does), tool calls lose their nulls
    (as `model_dump(exclude_none=True)` did) and cached prompt tokens are read from the raw usage."""
    reply_body = {
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "x",
                    "refusal": None,
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}, "extra": None}
                    ],
                },
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 6}},
    }
    fault_server.push(Reply(body=reply_body))
    backend = OpenAIBackend(
        "fake-model", base_url=fault_server.base_url, api_key="sk-raw", extra_body={"top_k": 3, "min_p": 0.1}
    )
    try:
        [completion] = await backend.forward(ask())
    finally:
        await backend.aclose()
    request = fault_server.requests[0]
    assert request.headers["authorization"] == "Bearer sk-raw"
    assert request.body["top_k"] == 3 and request.body["min_p"] == 0.1 and "extra_body" not in request.body
    assert completion.text == "x" and completion.finish_reason == "stop"
    assert completion.tool_calls == [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    assert (completion.usage.prompt_tokens, completion.usage.cached_prompt_tokens) == (10, 6)


async def test_client_retries_a_429_after_retry_after_then_succeeds(fault_server):
    """The typed error carries what the client layer needs: one 429, then the scripted success."""
    fault_server.push(Reply(status=429, headers={"Retry-After": "0.2"}), Reply(text="after the wait"))
    backend = OpenAIBackend("fake-model", base_url=fault_server.base_url, api_key="sk-test")
    client = LLMClient(backend, max_retries=2, backoff_initial_s=0.01)
    try:
        [completion] = await client.chat([{"role": "user", "content": "hi"}])
    finally:
        await client.aclose()
    assert completion.text == "after the wait 0"
    assert len(fault_server.requests) == 2


def test_no_key_for_the_public_api_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(BackendUnavailableError, match="--api-key"):
        OpenAIBackend("gpt-4o-mini")


async def test_key_and_base_url_from_the_sdk_variables(fault_server, monkeypatch):
    """No arguments: OPENAI_BASE_URL and OPENAI_API_KEY, the variables the openai SDK reads, are used."""
    monkeypatch.setenv("OPENAI_BASE_URL", fault_server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    backend = OpenAIBackend("fake-model")
    try:
        [completion] = await backend.forward(ask())
    finally:
        await backend.aclose()
    assert completion.text == "scripted reply 0"
    assert fault_server.requests[0].path == "/v1/chat/completions"
