"""What an experiment will cost, from token counts and a price, before anything is spent.

Calls are counted exactly from the data and the settings (problems × epochs × G rollouts, one summary
per rollout and one group analysis per query at most, one consolidation per step, N × K eval samples; GEPA:
its metric-call budget and the reflections it implies, `_gepa_calls`).
Tokens per call: the problem's own length (≈ characters / 4) plus the recipe's `estimate:` averages for
templates, the injected library and each kind of reply (and `tool_turns` model turns per trajectory with
tools). `ceiling_usd` takes every reply at its max_tokens and every trajectory at max_turns: no run costs
more, short of retries and tool outputs. Local backends cost $0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tfgrpo.core.datasets import load_dataset_rows
from tfgrpo.experiment.plan import Step
from tfgrpo.experiment.recipe import EstimateSpec
from tfgrpo.learn.loop import load_problems
from tfgrpo.llm.accounting import resolve_pricing
from tfgrpo.llm.config import LLMConfig
from tfgrpo.llm.factory import LOCAL_BACKENDS


@dataclass
class Calls:
    """`count` calls of `prompt` tokens replying `completion` tokens on average; at most `ceiling_count` calls
    of `ceiling_prompt` tokens replying `ceiling` tokens (every reply at its max_tokens)."""

    count: float
    prompt: float
    completion: float
    ceiling: float
    ceiling_count: float | None = None
    ceiling_prompt: float | None = None


@dataclass
class StepEstimate:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    ceiling_usd: float = 0.0
    price_known: bool = True


def _tokens(text: str) -> float:
    return len(text) / 4


def _trajectories(count: float, prompt: float, completion: float, cap: int, agent: Any, est: EstimateSpec) -> Calls:
    """With tools every model turn is a call whose prompt holds the earlier turns: `tool_turns` turns on
    average, `max_turns` turns of max_tokens each for the ceiling (tool outputs not counted)."""
    if not agent.tools:
        return Calls(count, prompt, completion, cap)
    turns, most = est.tool_turns, agent.max_turns
    return Calls(
        count * turns,
        prompt + completion * (turns - 1) / 2,
        completion,
        cap,
        ceiling_count=count * most,
        ceiling_prompt=prompt + cap * (most - 1) / 2,
    )


def _mean_problem_tokens(problems: list[Any]) -> float:
    return sum(_tokens(p.problem) for p in problems) / max(len(problems), 1)


def _learn_calls(step: Step, est: EstimateSpec) -> list[Calls]:
    config = step.config
    problems = load_problems(config, config.data)
    n, group, epochs = len(problems), config.group_size, config.epochs
    problem = _mean_problem_tokens(problems)
    batches = epochs * math.ceil(n / (config.batch_size or n or 1))
    rollout_cap, stage_cap = config.rollout_sampling.max_tokens, config.stage_sampling.max_tokens
    rollout = min(est.rollout_completion_tokens, rollout_cap)
    base, library = est.template_prompt_tokens, est.library_prompt_tokens
    calls = [
        _trajectories(n * epochs * group, base + library + problem, rollout, rollout_cap, config.agent, est),
        Calls(n * epochs * group, base + problem + rollout, min(est.summary_completion_tokens, stage_cap), stage_cap),
        Calls(
            n * epochs,
            base + library + group * est.summary_completion_tokens,
            min(est.advantage_completion_tokens, stage_cap),
            stage_cap,
        ),
        Calls(
            batches,
            base + library + (n * epochs / batches) * est.advantage_completion_tokens,
            min(est.consolidate_completion_tokens, stage_cap),
            stage_cap,
        ),
    ]
    if config.val_data:
        val = load_problems(config, config.val_data, training=False)
        calls.append(
            _trajectories(
                epochs * len(val) * config.val_samples,
                base + library + _mean_problem_tokens(val),
                rollout,
                rollout_cap,
                config.agent,
                est,
            )
        )
    return calls


def _eval_calls(step: Step, est: EstimateSpec) -> list[Calls]:
    config = step.config
    problems = load_dataset_rows(
        config.data,
        problem_key=config.problem_key,
        answer_key=config.answer_key,
        id_key=config.id_key,
        limit=config.limit,
    )
    prompt = (
        est.template_prompt_tokens
        + (est.library_prompt_tokens if config.library else 0)
        + _mean_problem_tokens(problems)
    )
    cap = config.sampling.max_tokens
    return [
        _trajectories(
            len(problems) * config.samples, prompt, min(est.eval_completion_tokens, cap), cap, config.agent, est
        )
    ]


def _gepa_calls(step: Step, est: EstimateSpec) -> list[Calls]:
    """GEPA scores the seed on its validation set (V problems), then per iteration the parent and the rewrite
    on a minibatch (2 × mb metric calls) after one reflection, and a rewrite that wins on the full validation
    set; it stops once `max_metric_calls` (M) are used. Expected: M task calls and, a rewrite kept every other
    iteration, (M − V) / (2·mb + V/2) reflections; ceiling: one iteration past M, and every rewrite rejected."""
    config = step.config
    keys = {"problem_key": config.problem_key, "answer_key": config.answer_key, "id_key": config.id_key}
    train = load_dataset_rows(config.data, limit=config.limit, **keys)
    val = load_dataset_rows(config.val_data, **keys) if config.val_data else train
    budget, batch, v = config.max_metric_calls, min(config.reflection_minibatch_size, len(train)), len(val)
    iterations = max(budget - v, 0) / (2 * batch + v / 2)
    most_iterations = math.ceil(max(budget - v, 0) / (2 * batch)) + 1
    cap, reflect_cap = config.sampling.max_tokens, config.reflection_sampling.max_tokens
    answer = min(est.rollout_completion_tokens, cap)
    problem = _mean_problem_tokens([*train, *val])
    base, prompt = est.template_prompt_tokens, est.library_prompt_tokens
    return [
        Calls(budget, base + prompt + problem, answer, cap, ceiling_count=budget + v + 2 * batch),
        Calls(
            iterations,
            base + prompt + batch * (problem + answer + 40),
            min(est.reflection_completion_tokens, reflect_cap),
            reflect_cap,
            ceiling_count=most_iterations,
            ceiling_prompt=base + prompt + batch * (problem + cap + 40),
        ),
    ]


def _llm_of(step: Step) -> LLMConfig | None:
    return getattr(step.config, "llm", None)


def step_calls(step: Step, est: EstimateSpec) -> list[Calls]:
    """The LLM calls of a learn, GEPA or eval step, by kind (none for fine-tuning and the report)."""
    if step.kind == "learn":
        return _learn_calls(step, est)
    if step.kind == "eval":
        return _eval_calls(step, est)
    if step.kind == "gepa":
        return _gepa_calls(step, est)
    return []


def estimate_step(step: Step, est: EstimateSpec) -> StepEstimate:
    """Calls, tokens and USD of one step (fine-tuning and the report are local: $0)."""
    calls = step_calls(step, est)
    if not calls:
        return StepEstimate()
    llm = _llm_of(step)
    pricing = resolve_pricing(
        llm.model, llm.price_input_per_1m, llm.price_output_per_1m, local=llm.backend in LOCAL_BACKENDS
    )
    prompt = sum(c.count * c.prompt for c in calls)
    completion = sum(c.count * c.completion for c in calls)
    ceiling_counts = [c.count if c.ceiling_count is None else c.ceiling_count for c in calls]
    ceiling_prompt = sum(
        n * (c.prompt if c.ceiling_prompt is None else c.ceiling_prompt)
        for n, c in zip(ceiling_counts, calls, strict=False)
    )
    ceiling_completion = sum(n * c.ceiling for n, c in zip(ceiling_counts, calls, strict=False))
    return StepEstimate(
        calls=int(sum(c.count for c in calls)),
        prompt_tokens=int(prompt),
        completion_tokens=int(completion),
        cost_usd=pricing.cost(int(prompt), int(completion)),
        ceiling_usd=pricing.cost(int(ceiling_prompt), int(ceiling_completion)),
        price_known=pricing.known,
    )


def method_of(step: Step) -> str | None:
    """The method a step belongs to, for the estimate per method: its training step and its evals together."""
    if step.kind == "learn":
        return "Training-Free GRPO"
    if step.kind == "gepa":
        return "GEPA"
    if step.kind == "finetune":
        return f"{step.system} ({step.config['method']})"
    if step.kind == "eval":
        system = step.system or ""
        if system.startswith("library-"):
            return "Training-Free GRPO"
        return {"base": "base", "gepa": "GEPA"}.get(system, system)
    return None


def estimate_by_method(plan: list[Step], estimates: dict[str, StepEstimate]) -> dict[str, StepEstimate]:
    """Each method's steps summed (fine-tunes: the calls of their evals; their training is local compute)."""
    by_method: dict[str, StepEstimate] = {"base": StepEstimate()} if any(s.system == "base" for s in plan) else {}
    finetune_names = {step.system: method_of(step) for step in plan if step.kind == "finetune"}
    for step in plan:
        method = method_of(step)
        method = finetune_names.get(step.system, method) if step.kind == "eval" else method
        if method is None:
            continue
        total, part = by_method.setdefault(method, StepEstimate()), estimates[step.id]
        total.calls += part.calls
        total.prompt_tokens += part.prompt_tokens
        total.completion_tokens += part.completion_tokens
        total.cost_usd += part.cost_usd
        total.ceiling_usd += part.ceiling_usd
        total.price_known = total.price_known and part.price_known
    return by_method


__all__ = ["Calls", "StepEstimate", "estimate_by_method", "estimate_step", "method_of", "step_calls"]
