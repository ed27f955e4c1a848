"""How long an experiment will take here: a few seconds of calibration per local backend, then each step's tokens.

Before anything runs (`estimate.calibrate`), every local backend the pending steps use is timed once: a
one-token call loads the model (load time), one call with a ~150-token prompt gives the prompt speed, and
short prompts answered with 1 and with 8 new tokens, alone and then side by side (as many as the backend
decodes at once, up to 32), give the time of one decode step and what each further sequence of a batch adds. A step's time then follows from the token counts of the cost estimate:
prompt tokens at the prompt speed, replies decoded as the backend decodes them (llama.cpp:
`llamacpp_instances` copies side by side; transformers and vLLM: batches of up to `batch_size` sequences,
each as long as its longest reply), and fine-tuning as its generated batches (RL methods) plus
`TRAIN_COST` forward passes' worth of work per trained token. API backends are not timed: their speed is
the provider's.
"""

from __future__ import annotations

import asyncio
import math
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from tfgrpo.core.datasets import load_dataset_rows
from tfgrpo.core.errors import EvalError
from tfgrpo.experiment.estimate import step_calls
from tfgrpo.experiment.plan import Step
from tfgrpo.experiment.recipe import Recipe
from tfgrpo.finetune.errors import FinetuneError
from tfgrpo.finetune.models import device_training_defaults
from tfgrpo.finetune.run import DATA_OPTIONS, build_method_config, method_spec
from tfgrpo.llm.config import LLMConfig
from tfgrpo.llm.errors import LLMError
from tfgrpo.llm.factory import LOCAL_BACKENDS, build_client
from tfgrpo.llm.types import SamplingParams

#: A LoRA training step costs about this many forward passes over the same tokens (forward, backward through
#: the frozen base, optimizer): 2.5-5 measured for SmolLM2-135M on a 2-core CPU (trained vs prompt tokens/s).
TRAIN_COST = 3.0
_MAX_CALIBRATION_ROWS = 32
_ONE_TOKEN = SamplingParams(temperature=0.0, max_tokens=1)
_CALIBRATION_TOKENS = 8
_LONG_PROMPT = " ".join(["one two three four five six seven eight"] * 16)  # ~150 tokens


@dataclass(frozen=True)
class Speed:
    """A local backend as timed here."""

    label: str
    load_s: float
    prompt_tps: float  # prompt tokens per second, one sequence
    step_s: float  # one decode step of one sequence
    row_s: float = 0.0  # added to a decode step by each further sequence of a batch (batched backends)
    streams: float = 1.0  # copies decoding side by side (llama.cpp instances, as measured)
    batch: int = 1  # most sequences per forward pass (batched backends)

    def prefill_s(self, tokens: float) -> float:
        return tokens / (self.prompt_tps * self.streams)

    def decode_s(
        self, sequences: float, tokens: float, batch: int | None = None, longest: float | None = None
    ) -> float:
        """`sequences` replies of `tokens` tokens on average, `batch` at a time (default: the backend's batch);
        a batch of several decodes until its longest reply is done (`longest`: the max_tokens cap)."""
        batch = batch or self.batch
        if batch <= 1:
            return sequences * tokens * self.step_s / self.streams
        full, rest = divmod(math.ceil(sequences), batch)
        per_batch = [batch] * full + ([rest] if rest else [])
        return sum(
            (tokens if rows == 1 else max(tokens, longest or tokens)) * (self.step_s + self.row_s * (rows - 1))
            for rows in per_batch
        )

    def describe(self) -> str:
        if self.batch > 1:
            rows = min(self.batch, _MAX_CALIBRATION_ROWS)
            rate = rows / (self.step_s + self.row_s * (rows - 1))
            decode = f"{1 / self.step_s:.0f} tokens/s alone, {rate:.0f} at batch {rows}"
        else:
            decode = f"{self.streams / self.step_s:.0f} tokens/s over {self.streams:.1f} copies"
        return f"{self.label}: {decode}, prompt {self.prompt_tps:.0f} tokens/s, load {self.load_s:.1f} s"


def speed_key(llm: LLMConfig) -> tuple[Any, ...] | None:
    """What decides a local backend's speed (no adapter: a merged adapter decodes as fast as its base)."""
    if llm.backend not in LOCAL_BACKENDS:
        return None
    return (llm.backend, llm.model, llm.llamacpp_instances, llm.batch_size, llm.dtype)


def step_llms(recipe: Recipe, step: Step) -> LLMConfig | None:
    """The model a step runs on: its own `llm`, or for fine-tuning the base model through transformers."""
    if step.kind == "finetune":
        return LLMConfig(backend="transformers", model=step.config["model"])
    llm = getattr(step.config, "llm", None)
    return llm.model_copy(update={"adapter": None}) if llm is not None else None


def calibrate(llms: list[LLMConfig]) -> dict[tuple[Any, ...], Speed]:
    """Time each distinct local backend among `llms` (a few seconds each); a backend that fails is left out."""
    speeds: dict[tuple[Any, ...], Speed] = {}
    for llm in llms:
        key = speed_key(llm)
        if key is None or key in speeds:
            continue
        try:
            speeds[key] = asyncio.run(_time_backend(llm))
        except LLMError:
            continue  # the step itself will say what is wrong with the backend
    return speeds


async def _first_call_s(client: Any) -> float:
    started = time.perf_counter()
    await client.chat([{"role": "user", "content": "Hi"}], sampling=_ONE_TOKEN, tag="calibrate")
    return time.perf_counter() - started


async def _time_backend(llm: LLMConfig) -> Speed:
    llm = llm.model_copy(update={"cache": None, "budget_usd": None, "adapter": None})
    warm_up = build_client(llm)  # the first load also imports the backend's libraries, once per process
    try:
        await _first_call_s(warm_up)
    finally:
        await warm_up.aclose()
    client = build_client(llm)
    one_token = _ONE_TOKEN
    try:
        load_s = await _first_call_s(client)  # what each step pays to load the model
        started = time.perf_counter()
        [long] = await client.chat([{"role": "user", "content": _LONG_PROMPT}], sampling=one_token, tag="calibrate")
        prompt_tps = max(long.usage.prompt_tokens, 1) / (time.perf_counter() - started)
        step_s = await _decode_step_s(client, 1)
        rows = llm.llamacpp_instances if llm.backend == "llamacpp" else min(llm.batch_size, _MAX_CALIBRATION_ROWS)
        step_many = await _decode_step_s(client, rows) if rows > 1 else step_s
    finally:
        await client.aclose()
    if llm.backend == "llamacpp":  # copies side by side: as many sequences per step as they really run in parallel
        streams = min(max(rows * step_s / step_many, 1.0), float(rows))
        return Speed(f"llamacpp x{rows}", load_s, prompt_tps, step_s, streams=streams)
    row_s = max(step_many - step_s, 0.0) / max(rows - 1, 1)
    return Speed(llm.backend, load_s, prompt_tps, step_s, row_s=row_s, batch=llm.batch_size)


async def _decode_step_s(client: Any, rows: int) -> float:
    """Seconds per decode step with `rows` sequences at once: the same prompts answered with 1 and with
    `_CALIBRATION_TOKENS` new tokens, so the difference is decoding alone (no prompt, no overhead)."""

    async def answer(max_tokens: int) -> tuple[float, int]:
        # sampled as runs sample (top-p sorts the vocabulary at every step: on CPU a large share of a batch's step)
        sampling = SamplingParams(temperature=0.7, top_p=0.95, max_tokens=max_tokens, seed=0)
        prompts = [f"Count from {10 * row} to {10 * row + 30}." for row in range(rows)]
        started = time.perf_counter()
        replies = await asyncio.gather(
            *[client.chat([{"role": "user", "content": prompt}], sampling=sampling) for prompt in prompts]
        )
        return time.perf_counter() - started, max(reply[0].usage.completion_tokens for reply in replies)

    prompt_only, _ = await answer(1)
    full, longest = await answer(_CALIBRATION_TOKENS)
    return max(full - prompt_only, 1e-3) / max(longest - 1, 1)


def step_seconds(recipe: Recipe, step: Step, speeds: dict[tuple[Any, ...], Speed]) -> float | None:
    """Expected wall time of one step on the timed backends; None when its backend was not timed."""
    if step.kind == "report":
        return 1.0
    llm = step_llms(recipe, step)
    key = speed_key(llm) if llm is not None else None
    speed = speeds.get(key) if key is not None else None
    if speed is None:
        return None
    if step.kind == "finetune":
        return _finetune_seconds(recipe, step, speed)
    calls = step_calls(step, recipe.estimate)
    return speed.load_s + sum(
        speed.prefill_s(c.count * c.prompt) + speed.decode_s(c.count, c.completion, longest=c.ceiling) for c in calls
    )


def _finetune_seconds(recipe: Recipe, step: Step, speed: Speed) -> float | None:
    """Model load, then per optimizer step: the generated batch (RL methods) and the trained tokens."""
    arguments, est = step.config, recipe.estimate
    options = {k: v for k, v in arguments["options"].items() if k not in DATA_OPTIONS}
    try:
        spec = method_spec(arguments["method"])
        with tempfile.TemporaryDirectory() as scratch:
            config = build_method_config(
                arguments["method"], {**device_training_defaults(), "output_dir": scratch, **options}
            )
    except FinetuneError:
        return None  # the step itself will fail with this message
    rows = config.per_device_train_batch_size * config.gradient_accumulation_steps
    prompt = est.template_prompt_tokens / 2 + 40  # the plain problem in the user template (no library)
    rl = spec.data == "prompts"
    cap = getattr(config, "max_completion_length", None) or est.rollout_completion_tokens
    completion = min(est.rollout_completion_tokens, cap)
    steps = config.max_steps if config.max_steps > 0 else _epoch_steps(recipe, step, config, rows, rl)
    if steps is None:
        return None
    sequences = 2 if spec.data == "pairs" else 1  # chosen and rejected
    per_step = speed.prefill_s(rows * sequences * (prompt + completion) * TRAIN_COST)
    if rl:  # the whole generation batch in one `generate`, as long as its longest reply
        per_step += speed.decode_s(rows, completion, batch=rows, longest=cap)
    return speed.load_s + steps * per_step


def _epoch_steps(recipe: Recipe, step: Step, config: Any, rows: int, rl: bool) -> int | None:
    """Optimizer steps of a run without max_steps: its examples over the batch, per epoch (for SFT on a learn
    run's rollouts, every rollout counted: a ceiling)."""
    data = str(step.settings["data"])
    try:
        if recipe.learn is not None and (data == "learn" or data.startswith("learn:")):
            settings = recipe.learn.settings
            problems = settings.get("limit") or len(load_dataset_rows(recipe.learn.data))
            count = problems if rl else problems * settings.get("group_size", 5) * settings.get("epochs", 1)
        else:
            count = len(load_dataset_rows(data))
    except (EvalError, OSError):
        return None
    return math.ceil(config.num_train_epochs * count / rows)


__all__ = ["Speed", "calibrate", "speed_key", "step_llms", "step_seconds"]
