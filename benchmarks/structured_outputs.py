"""Structured outputs on the embedded SmolLM2-135M-Instruct (transformers backend, CPU).

    OMP_NUM_THREADS=1 python benchmarks/structured_outputs.py                 # both tables (~6 min on 2 cores)
    python benchmarks/structured_outputs.py --prompts 2 --max-tokens 96       # quicker

Table 1, constrained decoding: for each engine (none, xgrammar, llguidance) the same stage-2 prompts are
decoded greedily under the stage-2 JSON schema. Columns: setup (engine built + the schema compiled, s),
first call (s), tokens/s over the later calls, and how many replies were valid (strict JSON, accepted by
the operations parser without repair).

Table 2, parse loss per stage: stage-2 (group) and stage-3 (consolidate) requests through
`request_operations` (the tolerant parser + one retry) with enforcement on (xgrammar) and off. Columns
are the metrics.json counters: replies, enforced, parsed, repaired, retried, lost.

The machine is shared: the load average is printed with the tables.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch is imported: 2 shared cores
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiences.model import Library  # noqa: E402
from experiences.parse import parse_operations  # noqa: E402
from experiences.schemas import reply_format  # noqa: E402
from tfgrpo.learn.metrics import REPLY_COUNTS  # noqa: E402
from tfgrpo.learn.stages import operations_response_schema, render_stage_prompt, request_operations  # noqa: E402
from tfgrpo.llm.backends.constrained import build_engine, engine_installed  # noqa: E402
from tfgrpo.llm.backends.transformers_backend import TransformersBackend  # noqa: E402
from tfgrpo.llm.client import LLMClient  # noqa: E402
from tfgrpo.llm.types import ChatRequest, Message, SamplingParams  # noqa: E402

PROBLEMS = [
    ("Tom has 7 apples and buys 5 more. How many apples does he have?", "12", "7 + 5 = 12", "7 + 5 = 11"),
    ("A box holds 6 rows of 4 eggs. How many eggs are in the box?", "24", "6 x 4 = 24", "6 + 4 = 10"),
    ("Sara reads 9 pages a day for 3 days. How many pages does she read?", "27", "9 x 3 = 27", "9 + 3 = 12"),
    ("There are 20 birds; 8 fly away. How many birds are left?", "12", "20 - 8 = 12", "20 + 8 = 28"),
]
LIBRARY = Library.from_texts(["When a problem says 'more', add the numbers.", "Check the answer by estimating."])


def group_prompt(problem: tuple[str, str, str, str], *, max_ops: int, max_words: int) -> list[dict[str, str]]:
    text, gold, good, bad = problem
    attempts = [
        {"index": 0, "reward": 1.0, "outcome": "correct", "summary": f"1. Computed {good}. 2. Answered {gold}."},
        {"index": 1, "reward": 0.0, "outcome": "wrong", "summary": f"1. Computed {bad}. 2. Answered with that."},
    ]
    prompt = render_stage_prompt(
        "group_advantage",
        problem=text,
        gold=gold,
        gold_is_pseudo=False,
        experiences=_library_text(),
        attempts=attempts,
        max_ops=max_ops,
        max_words=max_words,
        reply_format=reply_format(max_ops=max_ops, ids=LIBRARY.ids),
    )
    return [{"role": "user", "content": prompt}]


def consolidation_prompt(problems: list[tuple[str, str, str, str]], *, max_words: int) -> list[dict[str, str]]:
    proposals = [
        {
            "query_id": f"q{i}",
            "operations": [
                json.dumps(
                    {
                        "option": "add",
                        "experience": f"When solving '{p[0][:30]}...', write the operation before computing.",
                    }
                )
            ],
        }
        for i, p in enumerate(problems)
    ]
    prompt = render_stage_prompt(
        "consolidate",
        experiences=_library_text(),
        proposals=proposals,
        near_duplicates=[],
        max_words=max_words,
        reply_format=reply_format(max_ops=len(proposals), ids=LIBRARY.ids),
    )
    return [{"role": "user", "content": prompt}]


def _library_text() -> str:
    return "\n".join(f"[{e.id}] {e.text}" for e in LIBRARY)


def decoding_table(backend: TransformersBackend, args: argparse.Namespace) -> list[tuple]:
    loaded = backend._ensure_loaded()
    schema = operations_response_schema(LIBRARY, max_ops=args.max_ops, max_words=args.max_words)
    sampling = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    prompts = [group_prompt(p, max_ops=args.max_ops, max_words=args.max_words) for p in PROBLEMS[: args.prompts]]
    rows = []
    for engine in ("none", "xgrammar", "llguidance"):
        if engine != "none" and not engine_installed(engine):
            rows.append((engine, "not installed", "", "", ""))
            continue
        started = time.perf_counter()
        if engine != "none":
            vocab = max(loaded.model.config.vocab_size, len(loaded.tokenizer))
            loaded.constrained = build_engine(
                engine, loaded.tokenizer, vocab_size=vocab, stop_token_ids=sorted(loaded.eos_token_ids)
            )
            loaded.constrained.generate_options(schema.json_schema)  # xgrammar compiles here; llguidance builds lazily
        setup_s = time.perf_counter() - started
        timings, tokens, valid = [], 0, 0
        for index, messages in enumerate(prompts):
            request = ChatRequest(
                messages=[Message(**m) for m in messages],
                sampling=sampling,
                response_schema=None if engine == "none" else schema,
            )
            started = time.perf_counter()
            completion = backend._generate(loaded, [request], [backend._render(loaded.tokenizer, request)])[0][0]
            timings.append(time.perf_counter() - started)
            if index:
                tokens += completion.usage.completion_tokens
            valid += _strictly_valid(completion.text)
        later = sum(timings[1:])
        speed = f"{tokens / later:.1f}" if later else "n/a"
        rows.append((engine, f"{setup_s:.2f}", f"{timings[0]:.1f}", speed, f"{valid}/{len(prompts)}"))
        print(f"  {engine}: done", file=sys.stderr, flush=True)
    loaded.constrained = None
    return rows


def _strictly_valid(text: str) -> int:
    try:
        json.loads(text)
    except ValueError:
        return 0
    return int(parse_operations(text, LIBRARY).ok)


async def loss_table(backend: TransformersBackend, args: argparse.Namespace) -> list[tuple]:
    sampling = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    problems = PROBLEMS[: args.prompts]
    rows = []
    for mode in ("on", "off"):
        client = LLMClient(backend, structured_output=mode)
        for stage, batches in (
            ("group", [group_prompt(p, max_ops=args.max_ops, max_words=args.max_words) for p in problems]),
            ("consolidate", [consolidation_prompt(problems, max_words=args.max_words)]),
        ):
            counts = dict.fromkeys(REPLY_COUNTS, 0)
            for messages in batches:
                reply = await request_operations(
                    client,
                    messages,
                    library=LIBRARY,
                    sampling=sampling,
                    tag=stage,
                    max_words=args.max_words,
                    max_ops=args.max_ops if stage == "group" else len(problems),
                )
                counts["replies"] += 1
                counts["enforced"] += reply.enforced
                counts["parsed"] += reply.strict
                counts["repaired"] += not reply.strict and not reply.retried and reply.error is None
                counts["retried"] += reply.retried
                counts["lost"] += reply.lost
            rows.append((f"enforcement {mode}", stage, *(str(counts[k]) for k in REPLY_COUNTS)))
            print(f"  {mode} {stage}: done", file=sys.stderr, flush=True)
    return rows


def print_table(title: str, header: tuple, rows: list[tuple]) -> None:
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows, strict=False)]
    print(f"\n{title}")
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=False)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print("| " + " | ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=False)) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=3, help="stage-2 prompts per row (at most 4)")
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--max-ops", type=int, default=2)
    parser.add_argument("--max-words", type=int, default=24)
    parser.add_argument("--skip-loss", action="store_true", help="only the constrained-decoding table")
    args = parser.parse_args()
    load_before = os.getloadavg()
    backend = TransformersBackend(constrained_decoding="xgrammar")
    started = time.perf_counter()
    backend.load()
    print(f"SmolLM2 loaded in {time.perf_counter() - started:.1f}s", file=sys.stderr)
    decoding = decoding_table(backend, args)
    print_table(  # printed at once: the second table takes longer
        f"Constrained decoding, SmolLM2-135M transformers CPU, {args.prompts} stage-2 prompts, greedy, max {args.max_tokens} tokens",
        ("engine", "setup s", "first call s", "tokens/s (later calls)", "valid replies"),
        decoding,
    )
    sys.stdout.flush()
    if not args.skip_loss:
        loss = asyncio.run(loss_table(backend, args))
        print_table("Stage replies with and without enforcement (xgrammar)", ("mode", "stage", *REPLY_COUNTS), loss)
    print(
        f"\nload average (1/5/15 min) before: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}; "
        f"after: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (2 cores, shared)"
    )


if __name__ == "__main__":
    main()
