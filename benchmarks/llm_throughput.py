"""Throughput of the local backends on the embedded SmolLM2-135M-Instruct (completion tokens per second).

    OMP_NUM_THREADS=1 python benchmarks/llm_throughput.py            # full table (~5 min on 2 cores)
    python benchmarks/llm_throughput.py --prompts 16 --max-tokens 32  # quicker

Rows:
- one-at-a-time `generate`: plain transformers, one prompt per `model.generate` call (the baseline);
- transformers backend at 1, 8 and 32 concurrent requests (the backend batches concurrent requests);
- llamacpp backend (sequential: llama.cpp serves one request at a time), where llama-cpp-python is installed.

Every row decodes greedily up to `--max-tokens` new tokens for the same prompts; a row's tokens/s is the
completion tokens it produced divided by its wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch is imported: 2 shared cores
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tfgrpo.llm.types import ChatRequest, Message, SamplingParams  # noqa: E402

TOPICS = [
    "a prime number",
    "photosynthesis",
    "a black hole",
    "the water cycle",
    "an algorithm",
    "gravity",
    "a volcano",
    "democracy",
    "a vaccine",
    "inflation",
    "a triangle",
    "electricity",
    "the moon",
    "a cell",
    "a rainbow",
    "an atom",
    "a fraction",
    "the internet",
    "a glacier",
    "a compiler",
    "a derivative",
    "evolution",
    "a magnet",
    "the ocean tide",
    "a poem",
    "a bridge",
    "a desert",
    "an equation",
    "a comet",
    "a language",
    "a battery",
    "a forest",
]


@dataclass
class Row:
    name: str
    prompts: int
    completion_tokens: int
    seconds: float

    @property
    def tokens_per_s(self) -> float:
        return self.completion_tokens / self.seconds if self.seconds else 0.0


def questions(count: int) -> list[str]:
    return [f"In two sentences, explain what {TOPICS[i % len(TOPICS)]} is." for i in range(count)]


def request(question: str, max_tokens: int) -> ChatRequest:
    return ChatRequest(
        messages=[Message(role="user", content=question)],
        sampling=SamplingParams(temperature=0.0, max_tokens=max_tokens),
    )


def one_at_a_time_generate(model_dir: Path, prompts: list[str], max_tokens: int) -> Row:
    """The baseline: transformers `generate` on one prompt at a time."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()

    def generate(question: str) -> int:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True
        )
        inputs = tokenizer(text, return_tensors="pt", add_special_tokens=False)
        with torch.inference_mode():
            output = model.generate(
                **inputs, max_new_tokens=max_tokens, do_sample=False, pad_token_id=tokenizer.eos_token_id
            )
        new = output[0, inputs["input_ids"].shape[1] :].tolist()
        return next((i + 1 for i, t in enumerate(new) if t == tokenizer.eos_token_id), len(new))

    generate(prompts[0])  # warm-up: the first generate is slow
    started = time.perf_counter()
    tokens = sum(generate(q) for q in prompts)
    return Row("one-at-a-time `generate` (baseline)", len(prompts), tokens, time.perf_counter() - started)


async def through_backend(backend, name: str, prompts: list[str], max_tokens: int, concurrency: int) -> Row:
    semaphore = asyncio.Semaphore(concurrency)

    async def one(question: str) -> int:
        async with semaphore:
            [completion] = await backend.forward(request(question, max_tokens))
            return completion.usage.completion_tokens

    await backend.forward(request(prompts[0], max_tokens))  # warm-up
    started = time.perf_counter()
    counts = await asyncio.gather(*(one(q) for q in prompts))
    return Row(name, len(prompts), sum(counts), time.perf_counter() - started)


def run(args: argparse.Namespace) -> list[Row]:
    from tfgrpo.llm.backends.transformers_backend import TransformersBackend
    from tfgrpo.llm.embedded import embedded_model_dir

    model_dir = embedded_model_dir()
    prompts = questions(args.prompts)
    rows = [one_at_a_time_generate(model_dir, prompts[: args.baseline_prompts], args.max_tokens)]
    print(format_table(rows), flush=True)

    backend = TransformersBackend(str(model_dir), batch_size=max(args.concurrency))
    backend.load()

    async def sweep() -> None:
        try:
            for concurrency in args.concurrency:
                count = args.baseline_prompts if concurrency == 1 else args.prompts
                name = f"transformers backend, {concurrency} concurrent"
                rows.append(await through_backend(backend, name, prompts[:count], args.max_tokens, concurrency))
                print(format_table(rows[-1:], header=False), flush=True)
        finally:
            await backend.aclose()

    asyncio.run(sweep())

    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        print("llama-cpp-python not installed: skipping the llamacpp row", file=sys.stderr)
    else:
        from tfgrpo.llm.backends.llamacpp_backend import LlamaCppBackend

        llama = LlamaCppBackend(n_ctx=1024, n_threads=int(os.environ.get("OMP_NUM_THREADS", "1")))
        llama.load()

        async def llama_row() -> Row:
            try:
                return await through_backend(
                    llama, "llamacpp backend (Q4_1 GGUF), sequential", prompts, args.max_tokens, 8
                )
            finally:
                await llama.aclose()

        rows.append(asyncio.run(llama_row()))
    return rows


def format_table(rows: list[Row], *, header: bool = True, baseline: float | None = None) -> str:
    lines = []
    if header:
        lines += [
            "| setup | prompts | completion tokens | seconds | tokens/s | vs baseline |",
            "|---|---:|---:|---:|---:|---:|",
        ]
    for row in rows:
        ratio = f"{row.tokens_per_s / baseline:.1f}x" if baseline else ""
        cells = [row.name, row.prompts, row.completion_tokens, f"{row.seconds:.1f}", f"{row.tokens_per_s:.1f}", ratio]
        lines.append("| " + " | ".join(str(cell) for cell in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=32, help="prompts per concurrent row (default 32)")
    parser.add_argument(
        "--baseline-prompts", type=int, default=8, help="prompts for the one-at-a-time rows (default 8)"
    )
    parser.add_argument("--max-tokens", type=int, default=64, help="new tokens per prompt (default 64)")
    parser.add_argument(
        "--concurrency", type=int, nargs="+", default=[1, 8, 32], help="concurrency levels (default 1 8 32)"
    )
    args = parser.parse_args(argv)
    rows = run(args)
    baseline = rows[0].tokens_per_s
    print(
        f"\nSmolLM2-135M-Instruct, greedy, {args.max_tokens} new tokens max, OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}\n"
    )
    print(format_table(rows, baseline=baseline))
    best = max((r for r in rows if "32 concurrent" in r.name), key=lambda r: r.tokens_per_s, default=None)
    if best is not None:
        print(f"\nbatched (32 concurrent) vs one-at-a-time: {best.tokens_per_s / baseline:.1f}x (target >= 3x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
