"""`tfgrpo experiment`: run a recipe's steps in order, skipping those already complete with the same settings.

Before anything is spent the plan is printed with each step's status (done / to run / rerun) and the
cost estimate; `dry_run` stops there. One budget caps the whole experiment: each paid step gets what is
left of it (finished steps' recorded costs subtracted), and a step that reaches it stops the experiment
cleanly; the same command with a larger `--budget-usd` continues from there.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table as RichTable

from tfgrpo.core.config import dump_config
from tfgrpo.experiment.estimate import StepEstimate, estimate_step
from tfgrpo.experiment.plan import Step, build_plan
from tfgrpo.experiment.recipe import Recipe
from tfgrpo.experiment.state import ExperimentState
from tfgrpo.experiment.steps import StepOutcome, run_eval_step, run_finetune_step, run_learn_step
from tfgrpo.experiment.table import write_experiment_report

RUNNERS = {"learn": run_learn_step, "eval": run_eval_step, "finetune": run_finetune_step}


@dataclass
class ExperimentResult:
    status: str  # completed | planned | budget_exceeded | interrupted
    out: Path
    actions: dict[str, str] = field(default_factory=dict)  # step id -> skipped | ran
    estimate_usd: float = 0.0
    ceiling_usd: float = 0.0
    spent_usd: float = 0.0
    report: Path | None = None
    message: str = ""


def _status(step: Step, state: ExperimentState) -> str:
    if state.is_done(step.id, step.fingerprint):
        return "done"
    record = state.steps.get(step.id)
    if record is None:
        return "to run"
    if record.fingerprint != step.fingerprint:
        return "rerun: settings changed"
    return "resume"


def print_plan(plan: list[Step], state: ExperimentState, estimates: dict[str, StepEstimate], console: Console) -> None:
    table = RichTable(title="Experiment plan", title_justify="left")
    for column in ("#", "Step", "What", "Status", "Calls", "Est. cost", "Ceiling"):
        table.add_column(column, no_wrap=column == "Step")
    for index, step in enumerate(plan, start=1):
        estimate = estimates[step.id]
        status = _status(step, state)
        cost = (
            "local"
            if step.kind in ("finetune", "report")
            else f"${estimate.cost_usd:.2f}"
            if estimate.price_known
            else "no price"
        )
        table.add_row(
            str(index),
            step.id,
            step.label,
            f"[green]{status}[/]" if status == "done" else status,
            str(estimate.calls or "–"),
            cost,
            f"${estimate.ceiling_usd:.2f}" if estimate.calls else "–",
        )
    console.print(table)


def _estimate_line(pending: list[StepEstimate], budget_usd: float | None, spent: float) -> str:
    expected, ceiling = sum(e.cost_usd for e in pending), sum(e.ceiling_usd for e in pending)
    tokens = sum(e.prompt_tokens for e in pending), sum(e.completion_tokens for e in pending)
    line = (
        f"estimate for the steps still to run: ${expected:.2f} expected, ${ceiling:.2f} ceiling "
        f"(~{tokens[0]:,} prompt + {tokens[1]:,} completion tokens)"
    )
    if any(not e.price_known for e in pending):
        line += "; no price is known for some model: set model.price_input_per_1m / price_output_per_1m"
    if budget_usd is not None:
        line += f"; budget ${budget_usd:.2f}, ${spent:.2f} already spent"
        if expected > budget_usd - spent:
            line += " [yellow](the estimate exceeds what is left: the experiment will stop when it is spent)[/]"
    return line


def run_experiment(
    recipe: Recipe,
    out: str | Path,
    *,
    budget_usd: float | None = None,
    dry_run: bool = False,
    console: Any | None = None,
) -> ExperimentResult:
    """Plan, estimate, then run (or resume) every step; returns how it ended."""
    console = console or Console(stderr=True, soft_wrap=True)
    out = Path(out)
    plan = build_plan(recipe, out)
    state = ExperimentState.load(out)
    estimates = {step.id: estimate_step(step, recipe.estimate) for step in plan}
    print_plan(plan, state, estimates, console)
    pending = [estimates[s.id] for s in plan if not state.is_done(s.id, s.fingerprint)]
    step_ids = [step.id for step in plan]
    console.print(_estimate_line(pending, budget_usd, state.spent_usd(step_ids)), highlight=False)
    result = ExperimentResult(
        "planned",
        out,
        estimate_usd=sum(e.cost_usd for e in pending),
        ceiling_usd=sum(e.ceiling_usd for e in pending),
        spent_usd=state.spent_usd(step_ids),
    )
    if dry_run:
        return result
    out.mkdir(parents=True, exist_ok=True)
    (out / "recipe.yaml").write_text(
        dump_config(recipe), encoding="utf-8"
    )  # as run, overrides applied, secrets scrubbed
    state.recipe = recipe.name
    result.status = _run_steps(recipe, plan, state, result, budget_usd, console)
    result.spent_usd = state.spent_usd(step_ids)
    state.runs.append(
        {"ended": time.strftime("%Y-%m-%dT%H:%M:%S"), "status": result.status, "actions": result.actions}
    )
    state.save(out)
    if result.status == "completed":
        result.report = out / "report" / "report.md"
        ran = sum(action == "ran" for action in result.actions.values())
        console.print(
            f"[green]done[/]: {ran} steps ran, {len(result.actions) - ran} skipped (complete with the same settings); "
            f"{result.report} (and report.html, accuracy.png); ${result.spent_usd:.4f} spent",
            highlight=False,
        )
    return result


def _run_steps(
    recipe: Recipe,
    plan: list[Step],
    state: ExperimentState,
    result: ExperimentResult,
    budget_usd: float | None,
    console: Console,
) -> str:
    for index, step in enumerate(plan, start=1):
        if state.is_done(step.id, step.fingerprint):
            result.actions[step.id] = "skipped"
            continue
        # A learn run subtracts its own earlier sessions from the budget it is given; other steps do not.
        spent = state.spent_usd([s.id for s in plan], excluding=step.id if step.kind == "learn" else None)
        left = None if budget_usd is None else budget_usd - spent
        if left is not None and left <= 0 and step.kind in ("learn", "eval"):
            result.message = f"budget of ${budget_usd:.4f} is spent; {step.id} and later steps did not run"
            console.print(f"[yellow]{result.message}[/]. Rerun with a larger --budget-usd to continue.")
            return "budget_exceeded"
        console.rule(f"[{index}/{len(plan)}] {step.id}: {step.label}")
        state.mark_started(step.id, step.fingerprint)
        state.save(result.out)
        outcome = _run_one(recipe, plan, step, left, console)
        result.actions[step.id] = "ran"
        state.record_cost(step.id, outcome.cost_usd, cumulative=step.kind == "learn")
        state.save(result.out)
        if outcome.status != "done":
            result.message = outcome.message or outcome.status
            console.print(
                f"[yellow]{step.id} stopped: {result.message}[/]. Finished steps are kept; "
                "rerun the same command to continue."
            )
            return outcome.status
        state.mark_done(step.id, wall_s=round(outcome.wall_s, 3))
        state.save(result.out)
    return "completed"


def _run_one(recipe: Recipe, plan: list[Step], step: Step, budget_usd: float | None, console: Console) -> StepOutcome:
    if step.kind == "report":
        started = time.perf_counter()
        write_experiment_report(recipe, plan, step.out)
        return StepOutcome("done", 0.0, time.perf_counter() - started)
    try:
        return RUNNERS[step.kind](step, budget_usd, console)
    except KeyboardInterrupt:
        return StepOutcome("interrupted", message="interrupted by the user")


__all__ = ["ExperimentResult", "run_experiment"]
