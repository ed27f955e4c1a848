"""Structured outputs on the embedded SmolLM2-135M-Instruct (CPU): two tables, one mode each.

    OMP_NUM_THREADS=1 python benchmarks/structured_outputs.py --mode decoding   # table 1 (~3 min on 2 cores)
    OMP_NUM_THREADS=1 python benchmarks/structured_outputs.py --mode loss       # table 2 (~5-8 min on 2 cores)

Table 1 (`--mode decoding`, transformers backend), constrained decoding: for each engine (none, xgrammar,
llguidance) the same stage-2 prompts are decoded greedily under the stage-2 JSON schema. Columns: setup
(engine built + the schema compiled, s), first call (s), tokens/s over the later calls, and how many
replies were valid (strict JSON, accepted by the operations parser without repair).

Table 2 (`--mode loss`, llama.cpp in process, the quickstart's fast path), parse loss per stage: a real
`tfgrpo learn` run on the first `--problems` problems of the bundled `easy` set (G=4, batches of 3, stage
max_tokens 192), once with `structured_output=on` and once `off`; both share one response cache, so
the unstructured calls (rollouts, summaries) that are identical in both runs are generated once. The
group and consolidate rows are the runs' metrics.json counters. The judge rows: `--judge` rollouts of
the first run graded by the judge reward (`rewards/judge.py`, SmolLM2 as its own judge) with the
verdict schema on and off, same inputs. Columns: replies, enforced, parsed (strict JSON as it came),
repaired (usable after the tolerant parser), retried (asked again with feedback), lost (still unusable),
and the rates of lost / repaired / retried per reply.

The machine is shared: the load average is printed with the tables.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch is imported: 2 shared cores
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tfgrpo.experiences.model import Library  # noqa: E402
from tfgrpo.experiences.parse import parse_operations  # noqa: E402
from tfgrpo.experiences.schemas import reply_format  # noqa: E402
from tfgrpo.learn.config import LearnConfig  # noqa: E402
from tfgrpo.learn.loop import learn_async, load_problems  # noqa: E402
from tfgrpo.learn.metrics import REPLY_COUNTS  # noqa: E402
from tfgrpo.learn.stages import operations_response_schema, render_stage_prompt  # noqa: E402
from tfgrpo.llm.backends.constrained import build_engine, engine_installed  # noqa: E402
from tfgrpo.llm.backends.transformers_backend import TransformersBackend  # noqa: E402
from tfgrpo.llm.client import LLMClient  # noqa: E402
from tfgrpo.llm.config import LLMConfig  # noqa: E402
from tfgrpo.llm.factory import build_client  # noqa: E402
from tfgrpo.llm.types import ChatRequest, Message, SamplingParams  # noqa: E402
from tfgrpo.rewards.judge import JudgeReward  # noqa: E402
from tfgrpo.rollout.scoring import judge_schema  # noqa: E402

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


LOSS_STAGES = ("group", "consolidate", "judge")


async def loss_rows(args: argparse.Namespace) -> list[tuple]:
    """Learn runs with enforcement on and off (one shared cache), then the judge on the first run's rollouts."""
    from rich.console import Console

    rows, judged = [], None
    with tempfile.TemporaryDirectory(prefix="tfgrpo-bench-") as tmp:
        for mode in ("on", "off"):
            llm = LLMConfig(backend="llamacpp", structured_output=mode, cache=str(Path(tmp) / "cache.sqlite"))
            config = LearnConfig(
                data="easy",
                out=str(Path(tmp) / f"learn-{mode}"),
                limit=args.problems,
                group_size=4,
                epochs=1,
                batch_size=3,
                max_ops_per_group=2,
                rollout_sampling={"temperature": 0.7, "max_tokens": 128},
                stage_sampling={"temperature": 0.0, "max_tokens": args.stage_max_tokens},
                llm=llm,
            )
            client = build_client(llm)
            started = time.perf_counter()
            try:
                result = await learn_async(config, client=client, console=Console(file=io.StringIO()))
                judged = judged or _judge_inputs(config, args.judge)
                judge = await _judge_counts(client, judged, args.stage_max_tokens)
            finally:
                await client.aclose()
                client.close_cache()
            counts = {**result.metrics["totals"]["stage_replies"], "judge": judge}
            rows += [_loss_row(mode, stage, counts[stage]) for stage in LOSS_STAGES]
            print(f"  enforcement {mode}: {time.perf_counter() - started:.0f}s", file=sys.stderr, flush=True)
    return rows


def _judge_inputs(config: LearnConfig, limit: int) -> list[dict[str, str]]:
    """The first rollouts of a finished learn run, with their problem and gold answer."""
    problems = {p.id: p for p in load_problems(config, config.data)}
    inputs = []
    with open(Path(config.out) / "rollouts.jsonl", encoding="utf-8") as rows:
        for line in rows:
            row = json.loads(line)
            problem = problems.get(row["query_id"])
            if problem is not None and not row.get("error") and len(inputs) < limit:
                inputs.append({"completion": row["completion"], "problem": problem.problem, "answer": problem.answer})
    return inputs


async def _judge_counts(client: LLMClient, inputs: list[dict[str, str]], max_tokens: int) -> dict[str, int]:
    """The judge reward over `inputs` through `client` (the engine's path: a worker thread, the client's loop)."""
    sampling = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    complete = client.completer(
        asyncio.get_running_loop(), sampling=sampling, tag="judge", response_schema=judge_schema()
    )
    reward = JudgeReward(complete, concurrency=1)
    await asyncio.to_thread(
        reward.score,
        [i["completion"] for i in inputs],
        answer=[i["answer"] for i in inputs],
        problem=[i["problem"] for i in inputs],
    )
    return reward.reply_counts


def _loss_row(mode: str, stage: str, counts: dict[str, int]) -> tuple:
    replies = counts["replies"]
    rate = (lambda key: f"{counts[key] / replies:.0%}") if replies else (lambda key: "n/a")
    return (mode, stage, *(str(counts[k]) for k in REPLY_COUNTS), rate("lost"), rate("repaired"), rate("retried"))


def print_table(title: str, header: tuple, rows: list[tuple]) -> None:
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows, strict=False)]
    print(f"\n{title}")
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=False)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print("| " + " | ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=False)) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("decoding", "loss", "all"), default="all", help="which table(s)")
    parser.add_argument("--prompts", type=int, default=3, help="decoding: stage-2 prompts per row (at most 4)")
    parser.add_argument("--max-tokens", type=int, default=160, help="decoding: max new tokens")
    parser.add_argument("--max-ops", type=int, default=2)
    parser.add_argument("--max-words", type=int, default=24)
    parser.add_argument("--problems", type=int, default=9, help="loss: training problems of each learn run")
    parser.add_argument("--judge", type=int, default=6, help="loss: rollouts graded by the judge per mode")
    parser.add_argument(
        "--stage-max-tokens", type=int, default=192, help="loss: max tokens of stage and judge replies"
    )
    args = parser.parse_args()
    load_before = os.getloadavg()
    if args.mode in ("decoding", "all"):
        backend = TransformersBackend(constrained_decoding="xgrammar")
        started = time.perf_counter()
        backend.load()
        print(f"SmolLM2 loaded in {time.perf_counter() - started:.1f}s", file=sys.stderr)
        print_table(
            f"Constrained decoding, SmolLM2-135M transformers CPU, {args.prompts} stage-2 prompts, greedy, "
            f"max {args.max_tokens} tokens",
            ("engine", "setup s", "first call s", "tokens/s (later calls)", "valid replies"),
            decoding_table(backend, args),
        )
        sys.stdout.flush()
    if args.mode in ("loss", "all"):
        started = time.perf_counter()
        rows = asyncio.run(loss_rows(args))
        print_table(
            f"Stage replies with enforcement on vs off, SmolLM2-135M llama.cpp in process, {args.problems} easy "
            f"problems, G=4, stage/judge max {args.stage_max_tokens} tokens, judge on {args.judge} rollouts "
            f"({time.perf_counter() - started:.0f}s)",
            ("enforcement", "stage", *REPLY_COUNTS, "lost %", "repaired %", "retried %"),
            rows,
        )
    print(
        f"\nload average (1/5/15 min) before: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}; "
        f"after: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (2 cores, shared)"
    )


if __name__ == "__main__":
    main()
