"""Drive tfgrpo's in-process `vllm` backend on vLLM's CPU build; print what happened as one JSON line.

Run with the vLLM venv's Python (vLLM is importable only there), from the repository root:

    .venv-vllm/bin/python -m tests.helpers.vllm_in_process --adapter DIR --out DIR

One engine, built the way the CLI builds it (`LLMConfig(backend="vllm")` through `build_client`, so with
the CPU defaults the backend adds), serving the embedded SmolLM2 with a LoRA adapter; then: a chat, a
seeded n = 3 request twice, a JSON-schema reply, one long prompt twice (prefix caching), a one-step learn
run and an eval, both through the same engine (loading it once per flow would cost ~45 s each).
tests/llm/test_vllm_cpu.py reads the line and asserts. The `__main__` guard matters: vLLM spawns its
engine process, which imports this module again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from tfgrpo.eval.config import EvalConfig
from tfgrpo.eval.runner import evaluate_async
from tfgrpo.learn.config import LearnConfig
from tfgrpo.learn.loop import learn_async
from tfgrpo.llm.client import LLMClient
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


# Sums a 135M model gets right about 40 % of the time at temperature 0.7 (test_vllm_cpu.py's learn test).
SUMS = [("What is 2 + 3?", "5"), ("What is 4 + 4?", "8"), ("What is 6 - 1?", "5"), ("What is 3 + 3?", "6")]


async def drive(adapter: str, out: Path) -> dict[str, Any]:
    llm = LLMConfig(backend="vllm", adapter=adapter)
    client = build_client(llm)  # no response cache: every call decodes
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
        report["learn"] = await _learn(client, llm, out)
        report["eval"] = await _eval(client, llm, out)
        report["generate_calls"] = backend.generate_calls
    finally:
        await client.aclose()
    return report


async def _learn(client: LLMClient, llm: LLMConfig, out: Path) -> dict[str, Any]:
    """One learn step (4 sums, groups of 4) on the engine: the stage replies under vLLM's guided decoding."""
    data = out / "sums.jsonl"
    data.write_text(
        "".join(json.dumps({"id": f"s{i}", "problem": p, "answer": a}) + "\n" for i, (p, a) in enumerate(SUMS))
    )
    config = LearnConfig(
        data=str(data),
        out=str(out / "learn"),
        llm=llm,
        group_size=4,
        epochs=1,
        batch_size=4,
        max_ops_per_group=1,
        summary_max_tokens=64,
        dedup="off",
        rollout_sampling=SamplingParams(temperature=0.7, max_tokens=96, seed=3),
        stage_sampling=SamplingParams(temperature=0.0, max_tokens=192),
    )
    result = await learn_async(config, client=client)
    totals = result.metrics.get("totals", {})
    return {
        "status": result.status,
        "rollouts": totals.get("rollouts"),
        "stage_replies": totals.get("stage_replies"),
        "stage_replies_lost": totals.get("stage_replies_lost"),
        "experiences": len(result.library.experiences),
    }


async def _eval(client: LLMClient, llm: LLMConfig, out: Path) -> dict[str, Any]:
    """An eval of 2 bundled problems, 2 samples each, on the engine (the provenance names the backend)."""
    config = EvalConfig(
        data="easy",
        out=str(out / "eval"),
        limit=2,
        samples=2,
        llm=llm,
        sampling=SamplingParams(temperature=0.0, max_tokens=48),
    )
    result = await evaluate_async(config, client=client)
    rows = [json.loads(line) for line in (out / "eval" / "samples.jsonl").read_text().splitlines()]
    return {"samples": len(rows), "completions": [row["completion"] for row in rows], "metrics": result.metrics}


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
    parser.add_argument("--out", required=True, type=Path, help="a folder for the learn and eval runs")
    args = parser.parse_args()
    print("REPORT " + json.dumps(asyncio.run(drive(args.adapter, args.out))), flush=True)


if __name__ == "__main__":
    main()
