"""What each method of an experiment saw and did: the fairness table beside the paper table.

Per system: the problems it trained on, the validation set it used (if any), the sets it was evaluated on,
and the work its training did (learn: rollouts; GEPA: metric calls, reflections, candidates; a fine-tune:
optimizer steps and training samples), each read from the method's own run directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tfgrpo.eval.report import Table
from tfgrpo.experiment.plan import Step
from tfgrpo.experiment.recipe import Recipe
from tfgrpo.experiment.steps import read_json
from tfgrpo.finetune.run import SUMMARY_FILE


def _problems(data: str, limit: int | None) -> str:
    return data if limit is None else f"{data} (first {limit})"


def _learn_row(step: Step) -> tuple[str, str, str]:
    config = step.config
    totals = read_json(step.out / "metrics.json").get("totals") or {}
    init = f"; started from {Path(config.init_library).parent.name}'s prompt" if config.init_library else ""
    work = f"{totals.get('rollouts', '?')} rollouts, G={config.group_size}, {config.epochs} epoch(s){init}"
    return _problems(config.data, config.limit), config.val_data or "none", work


def _gepa_row(step: Step) -> tuple[str, str, str]:
    config = step.config
    totals = read_json(step.out / "metrics.json").get("totals") or {}
    seeded = f"; started from {Path(config.seed_library).parent.name}'s library" if config.seed_library else ""
    work = (
        f"{totals.get('metric_calls', '?')} metric calls, {totals.get('reflections', '?')} reflections, "
        f"{totals.get('candidates', '?')} candidates{seeded}"
    )
    return _problems(config.data, config.limit), config.val_data or "the training problems", work


def _finetune_row(step: Step, plan: dict[str, Step]) -> tuple[str, str, str]:
    arguments = step.config
    source = next((plan[d] for d in step.deps if d.startswith("learn/")), None)
    data = (
        f"{source.id}'s rollouts on {_problems(source.config.data, source.config.limit)}"
        if source
        else arguments["data"]
    )
    summary = read_json(step.out / SUMMARY_FILE)
    work = (
        f"{summary.get('steps', '?')} optimizer steps on {summary.get('samples', '?')} samples ({arguments['method']})"
    )
    return data, "none", work


def exposure_table(recipe: Recipe, plan: list[Step]) -> Table:
    by_id = {step.id: step for step in plan}
    evaluated = ", ".join(f"{name} ({spec.data}, K={spec.samples})" for name, spec in recipe.evals.items())
    first_set = next(iter(recipe.evals))
    rows = []
    for step in plan:
        if step.kind != "eval" or step.eval_set != first_set:
            continue
        training: Any = next((by_id[d] for d in step.deps), None)
        if training is None:
            seen = ("none", "none", "none (the frozen model)")
        elif training.kind == "learn":
            seen = _learn_row(training)
        elif training.kind == "gepa":
            seen = _gepa_row(training)
        else:
            seen = _finetune_row(training, by_id)
        rows.append([str(step.config.label), *seen[:2], evaluated, seen[2]])
    return Table(
        key="exposure",
        title="What each method saw",
        headers=["System", "Trained on", "Validated on", "Evaluated on", "Training work"],
        rows=rows,
        note="Same model, same eval (K, sampling, seed) for every row; no training or validation problem is in an "
        "eval set (the test-set lockout). Cost, tokens and time of each row are in the table above.",
    )


__all__ = ["exposure_table"]
