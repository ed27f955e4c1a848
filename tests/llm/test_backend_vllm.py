"""VLLMBackend's own code against a stand-in `vllm` module (fast): the import guard's error where vLLM is
absent, request → `vllm.SamplingParams`, batching of concurrent calls into one `LLM.chat`, LoRA via
`LoRARequest`, outputs → Completions, and the engine options a CPU gets. The stand-in is injected into
`sys.modules` and records what it is given. Real generation with vLLM's CPU build, in process and through
its OpenAI server: tests/llm/test_vllm_cpu.py.
"""

from __future__ import annotations

import asyncio
import importlib.machinery
import sys
import types

import pytest

from tests.helpers.servers import ask
from tests.helpers.vllm_stand_in import FakeLLM, FakeLoRARequest, FakeSamplingParams
from tfgrpo.llm.backends import vllm_backend
from tfgrpo.llm.backends.vllm_backend import CPU_ENGINE_DEFAULTS, VLLMBackend, check_cpu_memory_share
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
    with pytest.raises(BackendUnavailableError, match=r"install_vllm\.sh.*\.venv-vllm.*CUDA.*tfgrpo\[vllm\]"):
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


@pytest.fixture
def fake_cpu_platform(fake_vllm, monkeypatch):
    """vLLM's CPU build: `vllm.platforms.current_platform.is_cpu()` is True."""
    platforms = types.ModuleType("vllm.platforms")
    platforms.__spec__ = importlib.machinery.ModuleSpec("vllm.platforms", loader=None)
    platforms.current_platform = types.SimpleNamespace(is_cpu=lambda: True)
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    return platforms


async def test_on_the_cpu_the_engine_gets_eager_mode_and_a_small_memory_share(fake_cpu_platform):
    backend = VLLMBackend("org/model")
    overridden = VLLMBackend("org/model", engine_options={"gpu_memory_utilization": 0.05})
    try:
        await backend.forward(ask("one"))
        await overridden.forward(ask("two"))
    finally:
        await backend.aclose()
        await overridden.aclose()
    first, second = FakeLLM.instances
    assert first.options == {"model": "org/model", "dtype": "auto", **CPU_ENGINE_DEFAULTS}
    assert second.options["gpu_memory_utilization"] == 0.05 and second.options["enforce_eager"] is True


async def test_off_the_cpu_no_cpu_defaults_are_added(fake_vllm):
    backend = VLLMBackend("org/model")
    try:
        await backend.forward(ask("one"))
    finally:
        await backend.aclose()
    assert FakeLLM.instances[0].options == {"model": "org/model", "dtype": "auto"}


async def test_a_memory_share_larger_than_the_free_ram_is_refused_in_one_line(fake_cpu_platform, monkeypatch):
    monkeypatch.setattr(vllm_backend, "_available_ram_bytes", lambda: (24 * 1024**3, 17 * 1024**3))
    backend = VLLMBackend("org/model", engine_options={"gpu_memory_utilization": 0.92})
    try:
        with pytest.raises(BackendUnavailableError) as caught:
            await backend.forward(ask("one"))
    finally:
        await backend.aclose()
    message = str(caught.value)
    assert "\n" not in message and "0.92 of RAM (22.1 GiB)" in message and "17.0 GiB is available" in message
    assert "lower gpu_memory_utilization" in message and not FakeLLM.instances  # refused before loading
    check_cpu_memory_share(0.1)  # the default share fits


async def test_an_engine_that_does_not_start_is_one_line(fake_cpu_platform, monkeypatch):
    def dies(**options):
        raise RuntimeError("Engine core initialization failed. See root cause above. Failed core proc(s): {}")

    monkeypatch.setattr(sys.modules["vllm"], "LLM", dies)
    backend = VLLMBackend("org/model")
    try:
        with pytest.raises(BackendUnavailableError, match=r"vLLM's engine did not start on the CPU"):
            await backend.forward(ask("one"))
    finally:
        await backend.aclose()
