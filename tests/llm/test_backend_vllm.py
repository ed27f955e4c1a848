"""VLLMBackend. vLLM needs CUDA and pins its own torch, so it cannot run on CPU test machines.

What is tested here, honestly: (1) the import guard's error where vLLM is absent, and (2) the
backend's own code path (request → `vllm.SamplingParams`, batching of concurrent calls into one
`LLM.chat`, LoRA via `LoRARequest`, outputs → Completions) against a FAKE `vllm` module injected into
`sys.modules` that records what it is given. Real generation with vLLM is not exercised by this suite.
"""

from __future__ import annotations

import asyncio
import importlib.machinery
import sys
import types

import pytest

from tests.helpers.servers import ask
from tests.helpers.vllm_stand_in import FakeLLM, FakeLoRARequest, FakeSamplingParams
from tfgrpo.llm.backends.vllm_backend import VLLMBackend
from tfgrpo.llm.errors import BackendUnavailableError, ContextWindowExceededError
from tfgrpo.llm.types import SamplingParams


@pytest.fixture
def fake_vllm(monkeypatch):
    FakeLLM.instances.clear()
    module = types.ModuleType("vllm")
    module.__spec__ = importlib.machinery.ModuleSpec("vllm", loader=None)
    module.LLM = FakeLLM
    module.SamplingParams = FakeSamplingParams
    lora = types.ModuleType("vllm.lora")
    lora.__spec__ = importlib.machinery.ModuleSpec("vllm.lora", loader=None)
    lora_request = types.ModuleType("vllm.lora.request")
    lora_request.__spec__ = importlib.machinery.ModuleSpec("vllm.lora.request", loader=None)
    lora_request.LoRARequest = FakeLoRARequest
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setitem(sys.modules, "vllm.lora", lora)
    monkeypatch.setitem(sys.modules, "vllm.lora.request", lora_request)
    return module


def test_without_vllm_the_error_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm → ImportError, as where it is absent
    with pytest.raises(BackendUnavailableError, match=r"tfgrpo\[vllm\].*CUDA"):
        VLLMBackend("some/model")


async def test_requests_translate_to_sampling_params_and_batch(fake_vllm, tmp_path):
    backend = VLLMBackend("org/model", dtype="bfloat16", engine_options={"gpu_memory_utilization": 0.5})
    sampling = SamplingParams(temperature=0.8, top_p=0.9, max_tokens=64, stop=["\n"], seed=10)
    sampled = ask("alpha", n=3, sample_offset=2, sampling=sampling)
    greedy = ask("beta", n=2, sampling=SamplingParams(temperature=0.0, max_tokens=5))
    plain = ask("gamma", sampling=SamplingParams(temperature=0.5))
    try:
        a, b, c = await asyncio.gather(backend.forward(sampled), backend.forward(greedy), backend.forward(plain))
    finally:
        await backend.aclose()

    [llm] = FakeLLM.instances
    assert llm.options == {"model": "org/model", "dtype": "bfloat16", "gpu_memory_utilization": 0.5}
    [call] = llm.chat_calls  # three concurrent requests, one LLM.chat
    assert backend.generate_calls == 1
    assert call["conversations"][0] == [{"role": "user", "content": "alpha"}]
    params = call["sampling_params"]
    assert params[0] == FakeSamplingParams(n=3, temperature=0.8, top_p=0.9, max_tokens=64, stop=["\n"], seed=12)
    assert params[1] == FakeSamplingParams(n=1, temperature=0.0, top_p=1.0, max_tokens=5)  # greedy: decode once
    assert params[2].seed is None and params[2].stop is None
    assert "lora_request" not in call

    assert [x.text for x in a] == ["alpha #0", "alpha #1", "alpha #2"]
    assert [x.index for x in a] == [2, 3, 4]
    assert [x.usage.completion_tokens for x in a] == [2, 3, 4]
    assert sum(x.usage.prompt_tokens for x in a) == len("alpha")
    assert [x.text for x in b] == ["beta #0", "beta #0"]
    assert sum(x.usage.completion_tokens for x in b) == 2
    assert len(c) == 1 and c[0].finish_reason == "stop"


async def test_lora_adapter_goes_through_lora_request(fake_vllm, tmp_path):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    backend = VLLMBackend("org/model", adapter=str(adapter))
    try:
        await backend.forward(ask("delta"))
    finally:
        await backend.aclose()
    [llm] = FakeLLM.instances
    assert llm.options["enable_lora"] is True
    lora = llm.chat_calls[0]["lora_request"]
    assert lora == FakeLoRARequest("adapter", 1, str(adapter.resolve()))
    assert backend.model_name == f"org/model+lora:{adapter.resolve()}"


async def test_prompt_too_long_maps_to_context_window(fake_vllm):
    backend = VLLMBackend("org/model")
    try:
        with pytest.raises(ContextWindowExceededError):
            await backend.forward(ask("too long"))
    finally:
        await backend.aclose()


async def test_a_too_long_prompt_does_not_fail_its_batch_mates(fake_vllm):
    backend = VLLMBackend("org/model")
    try:
        results = await asyncio.gather(
            backend.forward(ask("too long")), backend.forward(ask("fine")), return_exceptions=True
        )
    finally:
        await backend.aclose()
    assert isinstance(results[0], ContextWindowExceededError)
    assert [c.text for c in results[1]] == ["fine #0"]
