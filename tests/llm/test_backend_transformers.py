"""TransformersBackend on a tiny random-init model (batching, n, stop, seeds, LoRA) and on SmolLM2."""

from __future__ import annotations

import asyncio

import pytest

from tests.helpers.servers import ask
from tests.helpers.tiny_models import tiny_model_dir
from tfgrpo.llm.backends.transformers_backend import TransformersBackend
from tfgrpo.llm.embedded import EMBEDDED_MODEL_NAME
from tfgrpo.llm.errors import BackendUnavailableError, ContextWindowExceededError
from tfgrpo.llm.types import SamplingParams

pytestmark = pytest.mark.timeout(180)

GREEDY = SamplingParams(temperature=0.0, max_tokens=8)
QUESTIONS = [f"question {i}: what is {i} + {i * 3}?" for i in range(8)]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def adapter_dir(tiny_dir, tmp_path_factory):
    """A LoRA adapter saved by peft, randomly initialised so that it changes the model's answers."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(tiny_dir))
    config = LoraConfig(r=8, lora_alpha=64, target_modules="all-linear", init_lora_weights=False)
    peft_model = get_peft_model(model, config)
    path = tmp_path_factory.mktemp("adapter") / "lora"
    peft_model.save_pretrained(str(path))
    return path


@pytest.fixture(scope="module")
def tiny_backend(tiny_dir):
    backend = TransformersBackend(str(tiny_dir), batch_size=32)
    backend.load()
    return backend


async def test_concurrent_calls_are_batched(tiny_backend):
    before = tiny_backend.generate_calls
    batched = await asyncio.gather(*(tiny_backend.forward(ask(q, sampling=GREEDY)) for q in QUESTIONS))
    assert tiny_backend.generate_calls - before <= 2
    assert all(len(result) == 1 for result in batched)

    # each answer belongs to its own prompt: the same as generating that prompt alone (left padding)
    before = tiny_backend.generate_calls
    alone = [await tiny_backend.forward(ask(q, sampling=GREEDY)) for q in QUESTIONS[:3]]
    assert tiny_backend.generate_calls - before == 3
    assert [r[0].text for r in alone] == [r[0].text for r in batched[:3]]


async def test_different_sampling_params_go_to_different_batches(tiny_backend):
    before = tiny_backend.generate_calls
    hot = SamplingParams(temperature=1.0, max_tokens=4, seed=1)
    await asyncio.gather(
        *(tiny_backend.forward(ask(q, sampling=GREEDY)) for q in QUESTIONS[:3]),
        *(tiny_backend.forward(ask(q, sampling=hot)) for q in QUESTIONS[:3]),
    )
    assert tiny_backend.generate_calls - before == 2


async def test_batch_size_caps_sequences_per_generate(tiny_dir):
    backend = TransformersBackend(str(tiny_dir), batch_size=4)
    try:
        sampling = SamplingParams(max_tokens=3, seed=0)
        results = await asyncio.gather(*(backend.forward(ask(q, n=2, sampling=sampling)) for q in QUESTIONS[:4]))
    finally:
        await backend.aclose()
    assert backend.generate_calls == 2  # 4 prompts x n=2 = 8 sequences, 4 per generate
    assert all(len(r) == 2 for r in results)


async def test_n_samples_usage_and_indices(tiny_backend):
    request = ask(QUESTIONS[0], n=3, sample_offset=4, sampling=SamplingParams(temperature=1.0, max_tokens=6, seed=3))
    completions = await tiny_backend.forward(request)
    assert [c.index for c in completions] == [4, 5, 6]
    assert len({c.text for c in completions}) >= 2, "sampled rows of a random model differ"
    assert all(0 < c.usage.completion_tokens <= 6 for c in completions)
    prompt_tokens = len(
        tiny_backend._loaded.tokenizer.apply_chat_template(  # noqa: SLF001 - compare with the tokenizer
            [{"role": "user", "content": QUESTIONS[0]}], tokenize=True, add_generation_prompt=True, return_dict=True
        )["input_ids"]
    )
    assert sum(c.usage.prompt_tokens for c in completions) == prompt_tokens
    assert all(c.finish_reason in {"stop", "length"} for c in completions)


async def test_seed_reproduces_and_greedy_n_copies(tiny_backend):
    seeded = ask(QUESTIONS[1], n=2, sampling=SamplingParams(temperature=1.0, max_tokens=6, seed=42))
    first = await tiny_backend.forward(seeded)
    again = await tiny_backend.forward(seeded)
    assert [c.text for c in first] == [c.text for c in again]
    greedy = await tiny_backend.forward(ask(QUESTIONS[1], n=3, sampling=GREEDY))
    assert len({c.text for c in greedy}) == 1 and len(greedy) == 3


async def test_stop_strings_cut_the_text(tiny_backend):
    long_greedy = SamplingParams(temperature=0.0, max_tokens=24)
    [full] = await tiny_backend.forward(ask(QUESTIONS[2], sampling=long_greedy))
    assert len(full.text) > 6, f"the tiny model should produce some text, got {full.text!r}"
    stop = full.text[3:6]
    expected = full.text[: full.text.find(stop)]
    [cut] = await tiny_backend.forward(ask(QUESTIONS[2], sampling=long_greedy.model_copy(update={"stop": [stop]})))
    assert cut.text == expected
    assert cut.finish_reason == "stop"


async def test_max_tokens_bounds_completion(tiny_backend):
    [completion] = await tiny_backend.forward(
        ask(QUESTIONS[3], sampling=SamplingParams(temperature=0.0, max_tokens=3))
    )
    assert completion.usage.completion_tokens <= 3


async def test_too_long_prompt_fails_alone(tiny_backend):
    too_long = ask("the answer is a number " * 600, sampling=GREEDY)
    results = await asyncio.gather(
        tiny_backend.forward(too_long),
        tiny_backend.forward(ask(QUESTIONS[4], sampling=GREEDY)),
        return_exceptions=True,
    )
    assert isinstance(results[0], ContextWindowExceededError)
    assert isinstance(results[1], list) and len(results[1]) == 1


async def test_lora_adapter_changes_the_answers(tiny_dir, adapter_dir, tiny_backend):
    with_adapter = TransformersBackend(str(tiny_dir), adapter=str(adapter_dir))
    try:
        adapted = await asyncio.gather(*(with_adapter.forward(ask(q, sampling=GREEDY)) for q in QUESTIONS[:4]))
    finally:
        await with_adapter.aclose()
    base = await asyncio.gather(*(tiny_backend.forward(ask(q, sampling=GREEDY)) for q in QUESTIONS[:4]))
    assert [r[0].text for r in adapted] != [r[0].text for r in base]
    assert "+lora:" in with_adapter.model_name and str(adapter_dir.resolve()) in with_adapter.model_name
    assert with_adapter.model_name != tiny_backend.model_name  # distinct cache keys


async def test_missing_model_or_adapter_is_a_clear_error(tmp_path, tiny_dir):
    missing = TransformersBackend(str(tmp_path / "no-such-model"))
    with pytest.raises(BackendUnavailableError, match="no-such-model"):
        await missing.forward(ask("hi", sampling=GREEDY))
    no_adapter = TransformersBackend(str(tiny_dir), adapter=str(tmp_path / "no-adapter"))
    with pytest.raises(BackendUnavailableError, match="adapter"):
        await no_adapter.forward(ask("hi", sampling=GREEDY))


@pytest.mark.slow
def test_embedded_smollm2_answers_with_text():
    """The default model (None → the embedded SmolLM2, dequantised once into the user cache)."""
    backend = TransformersBackend(None, batch_size=8)

    async def run():
        try:
            return await asyncio.gather(
                backend.forward(
                    ask("What is the capital of France?", sampling=SamplingParams(temperature=0.0, max_tokens=16))
                ),
                backend.forward(
                    ask("Name a primary colour.", sampling=SamplingParams(temperature=0.0, max_tokens=16))
                ),
            )
        finally:
            await backend.aclose()

    [[france], [colour]] = asyncio.run(run())
    assert backend.model_name == EMBEDDED_MODEL_NAME
    assert "Paris" in france.text
    assert colour.text.strip()
    assert backend.generate_calls == 1
    assert france.usage.prompt_tokens > 10 and 0 < france.usage.completion_tokens <= 16
