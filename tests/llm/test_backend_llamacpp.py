"""LlamaCppBackend: in-process llama.cpp on the embedded SmolLM2 GGUF (loaded once for the module)."""

from __future__ import annotations

import asyncio

import pytest

from tests.helpers.servers import ask
from tfgrpo.llm.backends.llamacpp_backend import LlamaCppBackend
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
