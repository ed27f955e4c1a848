"""The quickstart's rollout and eval waves on each local engine: load time, wall time, completion tokens/s.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/local_engines.py                 # all three engines
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/local_engines.py --engines llamacpp transformers

The waves are the quickstart recipe's (tfgrpo/experiment/recipes/quickstart.yaml) on the embedded
SmolLM2-135M-Instruct, with the prompts learn and eval send (rollout_user template, empty library):
- rollout: the 18 `easy_train` problems in 6 steps of 3 problems x G = 4 samples, 96 max tokens, T = 0.7
  (learn's rollout default), no seed; a step's 3 requests go out at once and the next step waits, as in learn;
- eval: the 16 `easy` problems x 2 samples, 96 max tokens, T = 0.6, top-p 0.95 (eval's defaults), no seed,
  at once. (No seed, as the recipe: the transformers backend batches only requests with equal sampling
  parameters, so one seed per request would decode them one at a time.)

Engines, each through its tfgrpo backend: `vllm` (vLLM's CPU build in process, fp32, the backend's CPU
defaults; it runs in a child process with `.venv-vllm`'s Python, made by scripts/install_vllm.sh),
`llamacpp` (the Q4_1 GGUF, 2 copies with one thread each, as the quickstart ships) and `transformers`
(fp32, batched `generate`). `load` is building the engine plus one 8-token warm-up request; `total` is
load + both waves. The CPU model and the load average are printed with the table: a 2-core machine
shared with other work gives different numbers at a different load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch is imported: 2 shared cores
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tfgrpo.core.datasets import resolve_dataset  # noqa: E402
from tfgrpo.llm.types import ChatRequest, Message, SamplingParams  # noqa: E402
from tfgrpo.prompts import render_prompt  # noqa: E402

VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
ENGINES = ("vllm", "llamacpp", "transformers")
ROLLOUT = {"data": "easy_train", "problems": 18, "per_step": 3, "n": 4, "temperature": 0.7, "top_p": 1.0}
EVAL = {"data": "easy", "problems": 16, "n": 2, "temperature": 0.6, "top_p": 0.95}
MAX_TOKENS = 96
WARM_UP = ChatRequest(
    messages=[Message(role="user", content="What is 1 + 1?")], sampling=SamplingParams(temperature=0.0, max_tokens=8)
)


@dataclass
class Wave:
    requests: int
    samples: int
    completion_tokens: int
    seconds: float

    @property
    def tokens_per_s(self) -> float:
        return self.completion_tokens / self.seconds if self.seconds else 0.0


@dataclass
class Result:
    engine: str
    load_s: float
    rollout: Wave
    eval: Wave


def problems(data: str, count: int) -> list[str]:
    path, _ = resolve_dataset(data)
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [row["problem"] for row in rows[:count]]


def request(problem: str, n: int, temperature: float, top_p: float) -> ChatRequest:
    return ChatRequest(
        messages=[Message(role="user", content=render_prompt("rollout_user", problem=problem))],
        n=n,
        sampling=SamplingParams(temperature=temperature, top_p=top_p, max_tokens=MAX_TOKENS),
    )


def build_backend(engine: str) -> Any:
    if engine == "vllm":
        from tfgrpo.llm.backends.vllm_backend import VLLMBackend

        return VLLMBackend(dtype="float32")
    if engine == "llamacpp":
        from tfgrpo.llm.backends.llamacpp_backend import LlamaCppBackend

        return LlamaCppBackend(instances=2)
    from tfgrpo.llm.backends.transformers_backend import TransformersBackend

    return TransformersBackend()


async def wave(backend: Any, requests: list[ChatRequest]) -> tuple[int, int]:
    replies = await asyncio.gather(*(backend.forward(r) for r in requests))
    return sum(len(r) for r in replies), sum(c.usage.completion_tokens for r in replies for c in r)


async def measure(engine: str) -> Result:
    started = time.perf_counter()
    backend = build_backend(engine)
    try:
        await backend.forward(WARM_UP)
        load_s = time.perf_counter() - started

        rollout_problems = problems(ROLLOUT["data"], ROLLOUT["problems"])
        started = time.perf_counter()
        samples = tokens = 0
        for first in range(0, len(rollout_problems), ROLLOUT["per_step"]):
            batch = [
                request(p, ROLLOUT["n"], ROLLOUT["temperature"], ROLLOUT["top_p"])
                for p in rollout_problems[first : first + ROLLOUT["per_step"]]
            ]
            got, count = await wave(backend, batch)
            samples, tokens = samples + got, tokens + count
        rollout = Wave(len(rollout_problems), samples, tokens, time.perf_counter() - started)

        eval_problems = problems(EVAL["data"], EVAL["problems"])
        started = time.perf_counter()
        got, count = await wave(
            backend,
            [request(p, EVAL["n"], EVAL["temperature"], EVAL["top_p"]) for p in eval_problems],
        )
        evaluation = Wave(len(eval_problems), got, count, time.perf_counter() - started)
    finally:
        await backend.aclose()
    return Result(engine, load_s, rollout, evaluation)


def in_vllm_venv() -> Result:
    """The vllm row, measured by this script run with the vLLM venv's Python (vLLM is importable only there)."""
    if not VLLM_PYTHON.is_file():
        raise SystemExit("vLLM's CPU build is not installed: run `bash scripts/install_vllm.sh` (it makes .venv-vllm)")
    result = subprocess.run(
        [str(VLLM_PYTHON), __file__, "--engines", "vllm", "--json"],
        capture_output=True,
        text=True,
        env=os.environ | {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "VLLM_NO_USAGE_STATS": "1"},
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    if result.returncode != 0 or not lines:
        raise SystemExit(f"the vllm row failed:\n{result.stderr[-3000:]}")
    data = json.loads(lines[-1].removeprefix("RESULT "))
    return Result(data["engine"], data["load_s"], Wave(**data["rollout"]), Wave(**data["eval"]))


def machine() -> str:
    model = platform.processor() or "unknown CPU"
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        model = next(line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name"))
    except (OSError, subprocess.CalledProcessError, StopIteration):
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"CPU: {model}, {os.cpu_count()} cores; load average (1, 5, 15 min): {load}"


NAMES = {
    "vllm": "vLLM CPU build, in process (fp32)",
    "llamacpp": "llama.cpp, 2 copies x 1 thread (Q4_1)",
    "transformers": "transformers, batched generate (fp32)",
}


def format_table(results: list[Result]) -> str:
    lines = [
        "| engine | load s | rollout wave s | rollout tok/s | eval wave s | eval tok/s | total s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        total = r.load_s + r.rollout.seconds + r.eval.seconds
        cells = [
            NAMES[r.engine],
            f"{r.load_s:.1f}",
            f"{r.rollout.seconds:.1f}",
            f"{r.rollout.tokens_per_s:.1f}",
            f"{r.eval.seconds:.1f}",
            f"{r.eval.tokens_per_s:.1f}",
            f"{total:.1f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES), help="engines to measure")
    parser.add_argument("--json", action="store_true", help="print one RESULT line per engine (used for vllm)")
    args = parser.parse_args(argv)
    if args.json:
        for engine in args.engines:
            print("RESULT " + json.dumps(asdict(asyncio.run(measure(engine)))), flush=True)
        return 0
    print(machine(), flush=True)
    results = []
    for engine in args.engines:
        results.append(in_vllm_venv() if engine == "vllm" else asyncio.run(measure(engine)))
        r = results[-1]
        print(
            f"{engine}: load {r.load_s:.1f} s, rollout {r.rollout.samples} samples / {r.rollout.completion_tokens} "
            f"tokens, eval {r.eval.samples} samples / {r.eval.completion_tokens} tokens",
            flush=True,
        )
    print(format_table(results))
    print(machine())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
