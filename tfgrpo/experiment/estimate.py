"""What an experiment will cost, from token counts and a price, before anything is spent.

Calls are counted exactly from the data and the settings (problems × epochs × G rollouts, one summary
per rollout and one group analysis per query at most, one consolidation per step, N × K eval samples).
Tokens per call: the problem's own length (≈ characters / 4) plus the recipe's `estimate:` averages for
templates, the injected library and each kind of reply. `ceiling_usd` uses every reply's max_tokens
instead of the averages: no run can cost more, short of retries. Local backends cost $0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from eval.datasets import load_dataset_rows
from tfgrpo.config import LLMConfig
from tfgrpo.experiment.plan import Step
from tfgrpo.experiment.recipe import EstimateSpec
from tfgrpo.learn import load_problems
from tfgrpo.llm.accounting import resolve_pricing
from tfgrpo.llm.factory import LOCAL_BACKENDS


@dataclass
class Calls:
    """`count` calls of `prompt` tokens each, replying `completion` tokens on average and `ceiling` at most."""

    count: int
    prompt: float
    completion: float
    ceiling: float


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


def _learn_calls(step: Step, est: EstimateSpec) -> list[Calls]:
    config = step.config
    problems = load_problems(config, config.data)
    n, group, epochs = len(problems), config.group_size, config.epochs
    mean_problem = sum(_tokens(p.problem) for p in problems) / max(n, 1)
    batches = epochs * math.ceil(n / (config.batch_size or n or 1))
    rollout = min(est.rollout_completion_tokens, config.rollout_sampling.max_tokens)
    stage_cap = config.stage_sampling.max_tokens
    base = est.template_prompt_tokens
    calls = [
        Calls(n * epochs * group, base + est.library_prompt_tokens + mean_problem, rollout, config.rollout_sampling.max_tokens),
        Calls(n * epochs * group, base + mean_problem + rollout, min(est.summary_completion_tokens, stage_cap), stage_cap),
        Calls(n * epochs, base + est.library_prompt_tokens + group * est.summary_completion_tokens,
              min(est.advantage_completion_tokens, stage_cap), stage_cap),
        Calls(batches, base + est.library_prompt_tokens + (n * epochs / batches) * est.advantage_completion_tokens,
              min(est.consolidate_completion_tokens, stage_cap), stage_cap),
    ]
    if config.val_data:
        val = load_problems(config, config.val_data, training=False)
        calls.append(Calls(epochs * len(val) * config.val_samples, base + est.library_prompt_tokens + mean_problem, rollout,
                           config.rollout_sampling.max_tokens))
    return calls


def _eval_calls(step: Step, est: EstimateSpec) -> list[Calls]:
    config = step.config
    problems = load_dataset_rows(config.data, problem_key=config.problem_key, answer_key=config.answer_key,
                                 id_key=config.id_key, limit=config.limit)
    prompt = est.template_prompt_tokens + (est.library_prompt_tokens if config.library else 0)
    cap = config.sampling.max_tokens
    count = len(problems) * config.samples
    mean_problem = sum(_tokens(p.problem) for p in problems) / max(len(problems), 1)
    return [Calls(count, prompt + mean_problem, min(est.eval_completion_tokens, cap), cap)]


def _llm_of(step: Step) -> LLMConfig | None:
    return getattr(step.config, "llm", None)


def estimate_step(step: Step, est: EstimateSpec) -> StepEstimate:
    """Calls, tokens and USD of one step (fine-tuning and the report are local: $0)."""
    if step.kind == "learn":
        calls = _learn_calls(step, est)
    elif step.kind == "eval":
        calls = _eval_calls(step, est)
    else:
        return StepEstimate()
    llm = _llm_of(step)
    pricing = resolve_pricing(llm.model, llm.price_input_per_1m, llm.price_output_per_1m, local=llm.backend in LOCAL_BACKENDS)
    prompt = sum(c.count * c.prompt for c in calls)
    completion = sum(c.count * c.completion for c in calls)
    ceiling = sum(c.count * c.ceiling for c in calls)
    return StepEstimate(
        calls=sum(c.count for c in calls),
        prompt_tokens=int(prompt),
        completion_tokens=int(completion),
        cost_usd=pricing.cost(int(prompt), int(completion)),
        ceiling_usd=pricing.cost(int(prompt), int(ceiling)),
        price_known=pricing.known,
    )


__all__ = ["StepEstimate", "estimate_step"]
