"""Which experiences matter: leave-one-out (or leave-one-group-out) ablation on a validation set.

The full library and every variant without one experience (or one group, when the library has more than
`max_groups` experiences: contiguous groups of about equal size) are evaluated with the same K samples per
problem. The utility of an experience is the paired difference full − without-it in Mean@K, averaged over
problems, with a percentile bootstrap CI over problems. `verdict`: `helps` when the CI lies above 0,
`hurts` when it lies below 0, `neutral` otherwise. In grouped mode each member gets its group's numbers.

Results go into the library's `metadata["ablation"]` (data, samples, full Mean@K, one entry per id);
`prune_by_utility` deletes the experiences whose verdict is `hurts`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from tfgrpo.core.stats import paired_bootstrap_ci
from tfgrpo.eval.runner import EvalConfig, EvalResult, evaluate
from tfgrpo.experiences.apply import ApplyResult, apply_operations, approximate_tokens
from tfgrpo.experiences.model import Library
from tfgrpo.experiences.ops import DeleteOp
from tfgrpo.experiences.render import render
from tfgrpo.llm.client import LLMClient
from tfgrpo.llm.errors import BudgetExceededError


class AblationPlan(BaseModel):
    groups: list[list[str]] = Field(description="Experience ids left out together, one variant per group.")
    problems: int
    samples: int
    calls: int = Field(description="Samples requested: (groups + 1) x problems x samples (cached ones are free).")
    prompt_tokens: int = Field(description="Estimated prompt tokens of all samples (≈ chars / 4).")
    completion_tokens: int = Field(description="Upper bound: every sample uses max_tokens.")
    cost_usd: float | None = Field(None, description="Upper-bound cost at the backend's prices (None: price unknown).")


def plan_groups(library: Library, max_groups: int) -> list[list[str]]:
    ids = library.ids
    if len(ids) <= max_groups:
        return [[i] for i in ids]
    size = math.ceil(len(ids) / max_groups)
    return [ids[i : i + size] for i in range(0, len(ids), size)]


def plan_ablation(
    library: Library, problems: list[str], config: EvalConfig, *, max_groups: int, pricing: Any | None = None
) -> AblationPlan:
    """What the ablation will request, and its worst-case cost, before any call."""
    groups = plan_groups(library, max_groups)
    variants = len(groups) + 1
    library_tokens = approximate_tokens(render(library))
    problem_tokens = sum(approximate_tokens(p) for p in problems)
    prompt = variants * config.samples * (len(problems) * library_tokens + problem_tokens)
    completion = variants * len(problems) * config.samples * config.sampling.max_tokens
    known = pricing is not None and getattr(pricing, "known", True)
    return AblationPlan(
        groups=groups,
        problems=len(problems),
        samples=config.samples,
        calls=variants * len(problems) * config.samples,
        prompt_tokens=prompt,
        completion_tokens=completion,
        cost_usd=pricing.cost(prompt, completion) if known else None,
    )


class _Runner:
    """Runs the evals of one ablation under one budget (each eval is an ordinary, cached eval run)."""

    def __init__(
        self,
        config: EvalConfig,
        budget_usd: float | None,
        client_for: Callable[[EvalConfig], LLMClient] | None,
        console: Any | None,
    ) -> None:
        self.config, self.budget_usd, self.client_for, self.console = config, budget_usd, client_for, console
        self.spent_usd = 0.0

    def run(self, library_path: Path, out: Path) -> tuple[dict[str, float], float]:
        """(problem id -> share correct, Mean@K) of one eval with this library."""
        remaining = None if self.budget_usd is None else self.budget_usd - self.spent_usd
        if remaining is not None and remaining <= 0:
            raise BudgetExceededError(self.spent_usd, self.budget_usd)
        llm = self.config.llm.model_copy(update={"budget_usd": remaining})
        member = self.config.model_copy(
            update={"library": str(library_path), "out": str(out), "label": out.name, "llm": llm}
        )
        try:
            result = evaluate(
                member, client=self.client_for(member) if self.client_for else None, console=self.console
            )
        except BudgetExceededError as exc:
            self.spent_usd += exc.spent_usd  # what the stopped eval spent before the cap
            raise
        self.spent_usd += result.metrics.get("cost_usd") or 0.0
        return _per_problem(result), result.metrics["mean_at_k"]


def ablate(
    library_path: str | Path,
    config: EvalConfig,
    plan: AblationPlan,
    *,
    budget_usd: float | None = None,
    client_for: Callable[[EvalConfig], LLMClient] | None = None,
    console: Any | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Evaluate the full library and each variant into `config.out/`; returns the `metadata["ablation"]` block.

    A budget stop keeps the groups measured so far and records `complete: false`.
    """
    library = Library.load(library_path)
    out = Path(config.out)
    variants_dir = out / "variants"
    variants_dir.mkdir(parents=True, exist_ok=True)
    runner = _Runner(config, budget_usd, client_for, console)
    block = {"data": config.data, "samples": config.samples, "grouped": any(len(g) > 1 for g in plan.groups)}
    try:
        full_scores, full_mean = runner.run(Path(library_path), out / "full")
    except BudgetExceededError:
        return {
            **block,
            "problems": 0,
            "full_mean_at_k": None,
            "complete": False,
            "spent_usd": runner.spent_usd,
            "utilities": {},
        }
    utilities: dict[str, Any] = {}
    complete = True
    for index, group in enumerate(plan.groups):
        name = "minus-" + "-".join(group) if len(group) <= 3 else f"minus-group-{index + 1}"
        variant = library.model_copy(deep=True, update={"experiences": [e for e in library if e.id not in group]})
        variant_path = variant.save(variants_dir / f"{name}.json")
        try:
            scores, _ = runner.run(variant_path, out / name)
        except BudgetExceededError:
            complete = False
            break
        ids = [i for i in full_scores if i in scores]
        without = [scores[i] for i in ids]
        with_it = [full_scores[i] for i in ids]
        utility = sum(a - b for a, b in zip(with_it, without, strict=False)) / len(ids)
        low, high = paired_bootstrap_ci(without, with_it, seed=seed)
        verdict = "helps" if low > 0 else "hurts" if high < 0 else "neutral"
        for experience_id in group:
            utilities[experience_id] = {"utility": utility, "ci95": [low, high], "verdict": verdict, "group": group}
    return {
        **block,
        "problems": len(full_scores),
        "full_mean_at_k": full_mean,
        "complete": complete,
        "spent_usd": runner.spent_usd,
        "utilities": utilities,
    }


def _per_problem(result: EvalResult) -> dict[str, float]:
    return {str(p["id"]): p["correct"] / p["n"] for p in result.metrics["per_problem"] if p["n"]}


def prune_by_utility(library: Library, *, min_utility: float | None = None) -> ApplyResult:
    """Delete experiences whose ablation verdict is `hurts` (or whose utility is below `min_utility`)."""
    ablation = library.metadata.get("ablation") or {}
    utilities = ablation.get("utilities") or {}
    doomed = [
        experience_id
        for experience_id, entry in utilities.items()
        if experience_id in library
        and (entry["verdict"] == "hurts" or (min_utility is not None and entry["utility"] < min_utility))
    ]
    return apply_operations(library, [DeleteOp(id=experience_id) for experience_id in doomed])


__all__ = ["AblationPlan", "ablate", "plan_ablation", "plan_groups", "prune_by_utility"]
