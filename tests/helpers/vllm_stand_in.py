"""A stand-in `vllm` module's classes: they record what VLLMBackend gives them (fast; the real engine: test_vllm_cpu.py)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class FakeSamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 16
    stop: list[str] | None = None
    seed: int | None = None


@dataclass
class FakeLoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str


@dataclass
class FakeSample:
    text: str
    token_ids: list[int]
    finish_reason: str


@dataclass
class FakeOutput:
    prompt_token_ids: list[int]
    outputs: list[FakeSample] = field(default_factory=list)


class FakeLLM:
    """Stands in for `vllm.LLM`: records constructor options and every `chat` call."""

    instances: list[FakeLLM] = []

    def __init__(self, **options):
        self.options = options
        self.chat_calls: list[dict] = []
        FakeLLM.instances.append(self)

    def chat(self, conversations, sampling_params, use_tqdm=True, **extra):
        self.chat_calls.append({"conversations": conversations, "sampling_params": sampling_params, **extra})
        outputs = []
        for conversation, params in zip(conversations, sampling_params, strict=True):
            content = conversation[-1]["content"]
            if content == "too long":
                raise ValueError("The decoder prompt (length 9000) is longer than the maximum model length of 2048.")
            samples = [FakeSample(f"{content} #{k}", list(range(k + 2)), "stop") for k in range(params.n)]
            outputs.append(FakeOutput(prompt_token_ids=list(range(len(content))), outputs=samples))
        return outputs
