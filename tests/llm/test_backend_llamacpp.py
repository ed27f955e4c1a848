"""LlamaCppBackend: in-process llama.cpp on the embedded SmolLM2 GGUF (loaded once for the module)."""

from __future__ import annotations

import asyncio
import os
import sys
import threading

import pytest
from pydantic import ValidationError

from tests.helpers.servers import ask
from tfgrpo.llm.backends.llamacpp_backend import LlamaCppBackend
from tfgrpo.llm.config import LLMConfig
from tfgrpo.llm.embedded import EMBEDDED_MODEL_NAME
from tfgrpo.llm.errors import BackendUnavailableError, ContextWindowExceededError
from tfgrpo.llm.types import SamplingParams

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def backend():
    pytest.importorskip("llama_cpp", reason="needs the llamacpp extra (CI installs it)")
    backend = LlamaCppBackend(n_ctx=512, n_threads=1)
    backend.load()
    yield backend
    asyncio.run(backend.aclose())


async def test_greedy_answer_is_text_with_usage(backend):
    [completion] = await backend.forward(ask(sampling=SamplingParams(temperature=0.0, max_tokens=12)))
    assert completion.text.strip()
    assert completion.usage.prompt_tokens > 10
    assert 0 < completion.usage.completion_tokens <= 12
    assert completion.finish_reason in {"stop", "length"}
    assert backend.model_name == f"{EMBEDDED_MODEL_NAME}@llamacpp"


async def test_n_seeded_samples_differ_and_reproduce(backend):
    request = ask(n=3, sample_offset=1, sampling=SamplingParams(temperature=1.0, max_tokens=8, seed=7))
    first = await backend.forward(request)
    again = await backend.forward(request)
    assert [c.index for c in first] == [1, 2, 3]
    assert len({c.text for c in first}) >= 2
    assert [c.text for c in again] == [c.text for c in first]


async def test_greedy_n_is_decoded_once_and_usage_shared(backend):
    single = await backend.forward(ask(sampling=SamplingParams(temperature=0.0, max_tokens=8)))
    copies = await backend.forward(ask(n=2, sampling=SamplingParams(temperature=0.0, max_tokens=8)))
    assert [c.text for c in copies] == [single[0].text] * 2
    assert sum(c.usage.completion_tokens for c in copies) == single[0].usage.completion_tokens


async def test_stop_string(backend):
    [completion] = await backend.forward(
        ask(
            "List three colours, separated by commas.",
            sampling=SamplingParams(temperature=0.0, max_tokens=30, stop=[","]),
        )
    )
    assert "," not in completion.text
    assert completion.finish_reason == "stop"


async def test_concurrent_calls_share_the_model_safely(backend):
    questions = ["Say hello.", "Name a fruit.", "Name an animal.", "Count to two."]
    results = await asyncio.gather(
        *(backend.forward(ask(q, sampling=SamplingParams(temperature=0.0, max_tokens=6))) for q in questions)
    )
    alone = await backend.forward(ask(questions[2], sampling=SamplingParams(temperature=0.0, max_tokens=6)))
    assert all(len(r) == 1 and r[0].text for r in results)
    assert results[2][0].text == alone[0].text


async def test_prompt_over_the_context_window(backend):
    with pytest.raises(ContextWindowExceededError):
        await backend.forward(ask("word " * 700, sampling=SamplingParams(max_tokens=4)))


async def test_missing_gguf_is_a_clear_error(tmp_path):
    pytest.importorskip("llama_cpp", reason="needs the llamacpp extra (CI installs it)")
    with pytest.raises(BackendUnavailableError, match="not found"):
        await LlamaCppBackend(str(tmp_path / "missing.gguf")).forward(ask())


@pytest.fixture(scope="module")
def two_copies():
    pytest.importorskip("llama_cpp", reason="needs the llamacpp extra (CI installs it)")
    backend = LlamaCppBackend(n_ctx=512, instances=2)
    yield backend
    asyncio.run(backend.aclose())


async def test_two_copies_decode_a_requests_samples_in_parallel(two_copies, monkeypatch):
    # Each copy's run of samples waits at a barrier for the other copy's: one copy doing both runs in
    # turn would time out there.
    both_running = threading.Barrier(2, timeout=30)
    copies_used, runs = set(), []
    draw = LlamaCppBackend._draw

    def draw_in_step(llama, request, seeds):
        copies_used.add(id(llama))
        runs.append(seeds)
        both_running.wait()
        return draw(llama, request, seeds)

    monkeypatch.setattr(LlamaCppBackend, "_draw", staticmethod(draw_in_step))
    request = ask(n=5, sample_offset=2, sampling=SamplingParams(temperature=1.0, max_tokens=8, seed=7))
    stdout, stdout_file = sys.stdout, os.fstat(1)
    samples = await two_copies.forward(request)  # both copies load here, at once
    # llama.cpp silences each load by redirecting the process's stdout: both loads must give it back
    assert sys.stdout is stdout and os.path.samestat(os.fstat(1), stdout_file)
    assert len(copies_used) == 2
    assert two_copies.n_threads == 1  # copies in parallel keep to one thread each
    # every sample drawn once with its own seed (seed + index), one contiguous run per copy (each reuses
    # its prompt's KV cache from one sample to the next)
    assert sorted(runs) == [[9, 10], [11, 12, 13]]
    assert [c.index for c in samples] == [2, 3, 4, 5, 6]
    assert len({c.text for c in samples}) >= 2 and all(c.usage.completion_tokens > 0 for c in samples)


async def test_unseeded_samples_differ_across_copies(two_copies):
    # Each copy would derive its next seed from its last one: two copies that have done the same number of
    # draws would then return the same samples.
    request = ask("Write one word.", n=4, sampling=SamplingParams(temperature=1.0, max_tokens=8))
    texts = [c.text for c in await two_copies.forward(request)]
    assert len(set(texts)) >= 3, texts


async def test_two_copies_serve_concurrent_requests_and_greedy_copies(two_copies):
    questions = ["Say hello.", "Name a fruit.", "Name an animal."]
    results = await asyncio.gather(
        *(two_copies.forward(ask(q, n=2, sampling=SamplingParams(temperature=0.0, max_tokens=6))) for q in questions)
    )
    assert all(len(r) == 2 and r[0].text and r[0].text == r[1].text for r in results)
    await two_copies.aclose()  # frees both copies; the next request loads again
    [again] = await two_copies.forward(ask(questions[0], sampling=SamplingParams(temperature=0.0, max_tokens=6)))
    assert again.text == results[0][0].text


def test_instances_option_is_for_llamacpp_only():
    assert LLMConfig(backend="llamacpp", llamacpp_instances=2).llamacpp_instances == 2
    with pytest.raises(ValidationError, match="llamacpp backend only"):
        LLMConfig(backend="transformers", llamacpp_instances=2)
    with pytest.raises(ValueError, match="at least 1"):
        LlamaCppBackend(instances=0)
