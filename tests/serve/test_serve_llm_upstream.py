"""`tfgrpo serve --upstream llm:BACKEND[:MODEL]`: a backend of the client layer behind the proxy.

Fast tests put a scripted backend (a real `Backend`) behind the proxy; the slow one serves the embedded
SmolLM2 through the in-process llama.cpp backend, driven by the real openai client.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI
from pydantic import ValidationError

from tests.helpers.serve_fixtures import write_library
from tests.helpers.serve_upstream import running
from tfgrpo.experiences import Library
from tfgrpo.experiences.export import export_text
from tfgrpo.llm.backends.scripted import ScriptedBackend
from tfgrpo.llm.client import LLMClient
from tfgrpo.llm.errors import InvalidRequestError, RateLimitError
from tfgrpo.serve.app import create_app
from tfgrpo.serve.config import ServeConfig

QUESTION = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}]


@contextlib.contextmanager
def llm_proxy(tmp_path: Path, backend: Any, **settings: Any) -> Iterator[tuple[str, Any]]:
    library = write_library(tmp_path / "library.json")
    config = ServeConfig(
        library=library, upstream="llm:openai:scripted", traces=str(tmp_path / "traces.sqlite"), **settings
    )
    client = LLMClient(backend, max_retries=config.max_retries, backoff_initial_s=0.0, backoff_max_s=0.0)
    app = create_app(config, llm_client=client)
    with running(app) as url:
        yield url, app.state.serve


def _openai(url: str) -> OpenAI:
    return OpenAI(base_url=url + "/v1", api_key="sk-client", max_retries=0)


def _traced(state: Any, exchange_id: str) -> dict[str, Any]:
    state.traces.flush()
    return state.traces.exchange(exchange_id)


def test_scripted_backend_json_and_stream_with_library_arms_headers_and_traces(tmp_path):
    backend = ScriptedBackend(lambda request, index: "four")
    with llm_proxy(tmp_path, backend) as (url, state):
        client = _openai(url)
        raw = client.chat.completions.with_raw_response.create(
            model="ignored", messages=QUESTION, temperature=0, max_tokens=7, stop="\n", seed=3
        )
        reply = raw.parse()
        assert reply.choices[0].message.content == "four" and reply.model == "scripted"
        assert raw.headers["x-tfgrpo-arm"] == "B" and raw.headers["x-tfgrpo-library-version"] == "3"
        sent = backend.calls[-1]
        library_prompt = export_text(Library.load(tmp_path / "library.json"), "system-prompt").strip()
        assert [m.model_dump(exclude_none=True) for m in sent.messages] == [
            {"role": "system", "content": library_prompt},
            *QUESTION,
        ]
        assert (sent.sampling.temperature, sent.sampling.max_tokens, sent.sampling.stop, sent.sampling.seed) == (
            0.0,
            7,
            ["\n"],
            3,
        )
        row = _traced(state, raw.headers["x-tfgrpo-exchange-id"])
        assert row["reply"] == "four" and row["upstream"] == "llm:openai:scripted" and row["status"] == 200
        assert row["messages"] == QUESTION and row["injected_ids"] == ["G0", "G1", "G2"]
        assert row["completion_tokens"] == 1 and row["prompt_tokens"] == reply.usage.prompt_tokens > 0

        # streaming: the whole reply as one content chunk, then the finish chunk, the usage chunk, [DONE]
        stream = client.chat.completions.create(
            model="m", messages=QUESTION, stream=True, stream_options={"include_usage": True}
        )
        chunks = list(stream)
        assert [c.choices[0].delta.content for c in chunks if c.choices] == ["four", None]
        assert chunks[-1].usage.completion_tokens == 1 and chunks[-2].choices[0].finish_reason == "stop"
        with httpx.stream("POST", url + "/v1/chat/completions", json={"messages": QUESTION, "stream": True}) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            assert "".join(r.iter_text()).rstrip().endswith("data: [DONE]")

        # arm A (holdout header) goes to the backend without the library
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=QUESTION, extra_headers={"x-tfgrpo-inject": "none"}
        )
        assert [m.model_dump(exclude_none=True) for m in backend.calls[-1].messages] == QUESTION
        models = httpx.get(url + "/v1/models").json()
        assert models["data"][0]["id"] == "scripted"
        health = httpx.get(url + "/health").json()
        assert health["upstreams"] == 1 and health["upstream_calls"]["calls"] == 4  # how many, never where


def test_holdout_arm_is_served_without_the_library(tmp_path):
    backend = ScriptedBackend(lambda request, index: "ok")
    with llm_proxy(tmp_path, backend, holdout=1.0) as (url, state):
        raw = _openai(url).chat.completions.with_raw_response.create(model="m", messages=QUESTION, user="u1")
        assert raw.headers["x-tfgrpo-arm"] == "A"
        assert [m.model_dump(exclude_none=True) for m in backend.calls[-1].messages] == QUESTION
        assert _traced(state, raw.headers["x-tfgrpo-exchange-id"])["arm"] == "A"


def test_backend_errors_map_to_http_statuses_retried_per_the_client_layer(tmp_path):
    failures = iter([RateLimitError("slow down", retry_after=0.0), RateLimitError("slow down", retry_after=0.0)])

    def respond(request, index):
        text = request.messages[-1].content
        if text == "rate":
            return next(failures, "after two 429s")
        if text == "always":
            return RateLimitError("quota", retry_after=7.0)
        if text == "bad":
            return InvalidRequestError("HTTP 400: prompt rejected")
        return "fine"

    with llm_proxy(tmp_path, ScriptedBackend(respond), max_retries=2) as (url, state):
        client = _openai(url)
        ask = [{"role": "user", "content": "rate"}]
        assert client.chat.completions.create(model="m", messages=ask).choices[0].message.content == "after two 429s"
        with pytest.raises(openai.RateLimitError) as caught:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "always"}])
        headers = caught.value.response.headers
        assert headers["x-tfgrpo-attempts"] == "3" and headers["retry-after"] == "7" and "x-tfgrpo-arm" in headers
        with pytest.raises(openai.BadRequestError, match="prompt rejected"):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "bad"}])
        # what the client layer cannot express is refused with a 400 naming it, never dropped
        with pytest.raises(openai.BadRequestError, match="logprobs"):
            client.chat.completions.create(model="m", messages=QUESTION, logprobs=True)
        with pytest.raises(openai.BadRequestError, match="role 'developer'"):
            client.chat.completions.create(model="m", messages=[{"role": "developer", "content": "x"}])
        state.traces.flush()
        statuses = sorted(row["status"] for row in state.traces.exchanges())
        assert statuses == [200, 400, 400, 400, 429]
        assert state.upstream.snapshot()["retries"] == 4


def test_a_reply_past_max_reply_bytes_is_a_502_and_its_trace_holds_no_more_than_the_cap(tmp_path):
    huge = "x" * 5000
    backend = ScriptedBackend(lambda request, index: huge if request.messages[-1].content == "long" else "short")
    with llm_proxy(tmp_path, backend, max_reply_bytes=4096) as (url, state):
        client = _openai(url)
        with pytest.raises(openai.InternalServerError) as caught:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "long"}])
        assert caught.value.status_code == 502 and "max_reply_bytes (4096)" in caught.value.message
        with pytest.raises(openai.InternalServerError):  # whole replies: refused before the stream starts
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "long"}], stream=True)
        assert client.chat.completions.create(model="m", messages=QUESTION).choices[0].message.content == "short"
        state.traces.flush()
        rows = state.traces.exchanges()
        failed = [row for row in rows if row["status"] == 502]
        assert len(failed) == 2 and all(row["error"] == "upstream_reply_too_large" for row in failed)
        assert all(huge not in str(row.get("reply")) for row in failed)


def test_config_spec_parsing_and_refusals(tmp_path):
    library = write_library(tmp_path / "library.json")
    config = ServeConfig(library=library, upstream="llm:litellm:ollama/llama3:8b", llm={"concurrency": 4})
    llm = config.llm_config("sk-secret")
    assert (llm.backend, llm.model, llm.concurrency, llm.api_key.get_secret_value()) == (
        "litellm",
        "ollama/llama3:8b",
        4,
        "sk-secret",
    )
    embedded = ServeConfig(library=library, upstream=["llm:llamacpp"]).llm_config(None)
    assert (embedded.backend, embedded.model, embedded.api_key) == ("llamacpp", None, None)
    for bad, message in [
        ({"upstream": "llm:nosuch"}, "not one of"),
        ({"upstream": ["llm:llamacpp", "http://x/v1"]}, "only upstream"),
        ({"upstream": "ftp://x"}, "neither an http"),
        ({"upstream": "llm:llamacpp", "model": "m"}, "names its model"),
        ({"upstream": "llm:llamacpp", "llm": {"max_retries": 1}}, "llm.max_retries"),
        ({"upstream": "http://x/v1", "llm": {"concurrency": 2}}, "only to an llm"),
    ]:
        with pytest.raises(ValidationError, match=message):
            ServeConfig(library=library, **bad)


@pytest.mark.slow
def test_embedded_smollm2_in_process_llamacpp_behind_serve(tmp_path):
    pytest.importorskip("llama_cpp", reason="needs the llamacpp extra (CI installs it)")
    from tfgrpo.llm.backends.llamacpp_backend import LlamaCppBackend

    library = write_library(tmp_path / "library.json")
    config = ServeConfig(library=library, upstream="llm:llamacpp", traces=str(tmp_path / "traces.sqlite"))
    app = create_app(config)
    assert isinstance(app.state.serve.upstream.client.backends[0], LlamaCppBackend)  # the embedded model, in process
    with running(app) as url:
        openai_client = _openai(url)
        ask = [{"role": "user", "content": "Say hello."}]
        raw = openai_client.chat.completions.with_raw_response.create(
            model="smollm2", messages=ask, max_tokens=8, temperature=0
        )
        reply = raw.parse()
        text = reply.choices[0].message.content
        assert text and reply.model.startswith("smollm2-135m-instruct") and 0 < reply.usage.completion_tokens <= 8
        # the library went into the model's prompt: far more prompt tokens than the question alone
        bare = openai_client.chat.completions.create(
            model="m", messages=ask, max_tokens=8, temperature=0, extra_headers={"x-tfgrpo-inject": "none"}
        )
        assert reply.usage.prompt_tokens > bare.usage.prompt_tokens + 20
        stream = openai_client.chat.completions.create(
            model="m", messages=ask, max_tokens=8, temperature=0, stream=True
        )
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == text  # greedy: same reply
        state = app.state.serve
        row = _traced(state, raw.headers["x-tfgrpo-exchange-id"])
        assert row["reply"] == text and row["upstream"] == "llm:llamacpp" and row["injected_ids"] == ["G0", "G1", "G2"]
