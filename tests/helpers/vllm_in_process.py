"""Drive tfgrpo's in-process `vllm` backend on vLLM's CPU build; print what happened as one JSON line.

Run with the vLLM venv's Python (vLLM is importable only there), from the repository root:

    .venv-vllm/bin/python -m tests.helpers.vllm_in_process --adapter DIR

One engine, built the way the CLI builds it (`LLMConfig(backend="vllm")` through `build_client`, so with
the CPU defaults the backend adds), serving the embedded SmolLM2 with a LoRA adapter; then: a chat, a
seeded n = 3 request twice, a JSON-schema reply, and one long prompt twice (prefix caching).
tests/llm/test_vllm_cpu.py reads the line and asserts. The `__main__` guard matters: vLLM spawns its
engine process, which imports this module again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from tfgrpo.llm.config import LLMConfig
from tfgrpo.llm.factory import build_client
from tfgrpo.llm.types import ResponseSchema, SamplingParams

ANSWER_SCHEMA = ResponseSchema(
    name="answer",
    schema={
        "type": "object",
        "properties": {"answer": {"type": "integer"}},
        "required": ["answer"],
        "additionalProperties": False,
    },
)
LONG_SYSTEM = "You are a careful assistant. Answer briefly and check every step. " * 20


async def drive(adapter: str) -> dict[str, Any]:
    client = build_client(LLMConfig(backend="vllm", adapter=adapter))  # no response cache: every call decodes
    [backend] = client.backends
    report: dict[str, Any] = {"model_name": client.model_name}
    try:
        started = time.perf_counter()
        [chat] = await client.chat(
            [{"role": "user", "content": "What is the capital of France?"}],
            sampling=SamplingParams(temperature=0.0, max_tokens=24),
        )
        report["load_and_first_chat_s"] = round(time.perf_counter() - started, 1)
        report["chat"] = {"text": chat.text, "prompt_tokens": chat.usage.prompt_tokens}
        report["engine_options"] = _engine_options(backend)

        seeded = SamplingParams(temperature=1.0, max_tokens=24, seed=11)
        question = [{"role": "user", "content": "Name a colour."}]
        first = await client.chat(question, n=3, sampling=seeded)
        again = await client.chat(question, n=3, sampling=seeded)
        report["seeded"] = {"first": [c.text for c in first], "again": [c.text for c in again]}

        [structured] = await client.chat(
            [{"role": "user", "content": "What is 2 + 3? Reply in JSON."}],
            sampling=SamplingParams(temperature=0.0, max_tokens=32),
            response_schema=ANSWER_SCHEMA,
        )
        report["structured"] = {"text": structured.text, "enforced": structured.schema_enforced}

        long_prompt = [{"role": "system", "content": LONG_SYSTEM}, {"role": "user", "content": "Say hello."}]
        cached = []
        for _ in range(2):
            [reply] = await client.chat(long_prompt, sampling=SamplingParams(temperature=0.0, max_tokens=4))
            cached.append({"prompt": reply.usage.prompt_tokens, "cached": reply.usage.cached_prompt_tokens})
        report["prefix"] = cached
        report["generate_calls"] = backend.generate_calls
    finally:
        await client.aclose()
    return report


def _engine_options(backend: Any) -> dict[str, Any]:
    """What the engine was built with (read back from vLLM's own config)."""
    config = backend._llm.llm_engine.vllm_config
    return {
        "enforce_eager": config.model_config.enforce_eager,
        "gpu_memory_utilization": config.cache_config.gpu_memory_utilization,
        "enable_lora": config.lora_config is not None,
        "device": str(config.device_config.device),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--adapter", required=True, help="a LoRA adapter folder trained on the embedded model")
    args = parser.parse_args()
    print("REPORT " + json.dumps(asyncio.run(drive(args.adapter))), flush=True)


if __name__ == "__main__":
    main()
