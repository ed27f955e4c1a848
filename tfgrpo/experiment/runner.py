"""`tfgrpo experiment`: run a recipe's steps in order, skipping those already complete with the same settings.

Before anything is spent the plan is printed with each step's status (done / to run / rerun), the cost
estimate and, after a few seconds of timing the local backends, the expected wall time; `dry_run` stops
there. One budget caps the whole experiment: each paid step gets what is left of it (finished steps'
recorded costs subtracted), and a step that reaches it stops the experiment cleanly; the same command with
a larger `--budget-usd` continues from there. A fine-tuned baseline that cannot be trained or evaluated
(a `tfgrpo finetune` error such as no usable data or nothing learned, or its eval's) is recorded as failed
and the experiment goes on: the table marks its row, and the next run tries it again.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table as RichTable

from tfgrpo.core.atomic import folder_target
from tfgrpo.core.config import ConfigError, dump_config
from tfgrpo.core.errors import EvalError
from tfgrpo.core.tracking import open_trackers, require_trackers
from tfgrpo.experiment.checks import check_recipe_inputs
from tfgrpo.experiment.estimate import StepEstimate, estimate_by_method, estimate_step
from tfgrpo.experiment.gepa_run import require_gepa
from tfgrpo.experiment.plan import Step, build_plan
from tfgrpo.experiment.recipe import Recipe
from tfgrpo.experiment.state import ExperimentState
from tfgrpo.experiment.steps import StepOutcome, run_eval_step, run_finetune_step, run_gepa_step, run_learn_step
from tfgrpo.experiment.table import write_experiment_report
from tfgrpo.experiment.timing import calibrate, step_llms, step_seconds
from tfgrpo.finetune.errors import FinetuneError
from tfgrpo.llm.errors import LLMError
from tfgrpo.llm.factory import LOCAL_BACKENDS

RUNNERS = {"learn": run_learn_step, "gepa": run_gepa_step, "eval": run_eval_step, "finetune": run_finetune_step}
#: what fails one fine-tuned baseline (its training or its eval) without stopping the experiment
BASELINE_ERRORS = (FinetuneError, EvalError, LLMError)


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
    failed: dict[str, str] = field(default_factory=dict)  # step id -> why (fine-tuned baselines only)
    estimate_s: float | None = None  # expected wall time of the steps still to run (local backends timed)


def _status(step: Step, state: ExperimentState) -> str:
    if state.is_done(step.id, step.fingerprint):
        return "done"
    record = state.steps.get(step.id)
    if record is None:
        return "to run"
    if record.fingerprint != step.fingerprint:
        return "rerun: settings changed"
    return "retry: failed last time" if record.status == "failed" else "resume"


def _seconds(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.0f} s" if value < 90 else f"{value / 60:.1f} min"


def print_plan(
    plan: list[Step],
    state: ExperimentState,
    estimates: dict[str, StepEstimate],
    console: Console,
    times: dict[str, float | None] | None = None,
) -> None:
    table = RichTable(title="Experiment plan", title_justify="left")
    columns = ("#", "Step", "What", "Status", "Calls", "Est. cost", "Ceiling") + (("Est. time",) if times else ())
    for column in columns:
        table.add_column(column, no_wrap=column == "Step", overflow="fold")
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
            *(("–" if status == "done" else _seconds(times.get(step.id)),) if times else ()),
        )
    console.print(table)
    by_method = estimate_by_method(plan, estimates)
    if len(by_method) > 1:
        methods = RichTable(title="Estimate per method (its training and its evals)", title_justify="left")
        for column in ("Method", "Calls", "Prompt tokens", "Completion tokens", "Est. cost", "Ceiling"):
            methods.add_column(column)
        for method, total in by_method.items():
            cost = f"${total.cost_usd:.2f}" if total.price_known else "no price"
            methods.add_row(
                method,
                f"{total.calls:,}",
                f"{total.prompt_tokens:,}",
                f"{total.completion_tokens:,}",
                cost,
                f"${total.ceiling_usd:.2f}",
            )
        console.print(methods)


def estimate_times(recipe: Recipe, pending: list[Step], console: Console) -> dict[str, float | None]:
    """Time the local backends the pending steps use (a few seconds), then each pending step."""
    if not recipe.estimate.calibrate:
        return {}
    llms = [llm for step in pending if (llm := step_llms(recipe, step)) is not None]
    if not any(llm.backend in LOCAL_BACKENDS for llm in llms):
        return {}
    console.print("timing the local backends for the time estimate (a few seconds)...", highlight=False)
    started = time.perf_counter()
    speeds = calibrate(llms)
    for speed in speeds.values():
        console.print(f"  {speed.describe()}", highlight=False)
    console.print(f"  (timed in {time.perf_counter() - started:.0f} s)", highlight=False)
    return {step.id: step_seconds(recipe, step, speeds) for step in pending}


def _time_line(times: dict[str, float | None]) -> str | None:
    if not times:
        return None
    known = [t for t in times.values() if t is not None]
    line = f"time estimate for the steps still to run: ~{_seconds(sum(known))} on this machine"
    if len(known) < len(times):
        line += f" ({len(times) - len(known)} steps on API backends or untimed not counted)"
    return line + " (other programs running on it slow it down)"


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
    if budget_usd is not None and not (math.isfinite(budget_usd) and budget_usd > 0):
        raise ConfigError(f"--budget-usd must be a number > 0 (got {budget_usd:g}); leave it out for no cap")
    out = folder_target(out, ConfigError)  # also in a dry run: the plan is for a folder that can exist
    check_recipe_inputs(recipe)  # a dry run too: a plan of a method or a file that does not exist is no plan
    require_trackers(recipe.trackers)
    plan = build_plan(recipe, out)
    state = ExperimentState.load(out)
    estimates = {step.id: estimate_step(step, recipe.estimate) for step in plan}
    to_run = [step for step in plan if not state.is_done(step.id, step.fingerprint)]
    times = estimate_times(recipe, to_run, console)
    print_plan(plan, state, estimates, console, times)
    pending = [estimates[s.id] for s in to_run]
    step_ids = [step.id for step in plan]
    console.print(_estimate_line(pending, budget_usd, state.spent_usd(step_ids)), highlight=False)
    time_line = _time_line(times)
    if time_line:
        console.print(time_line, highlight=False)
    result = ExperimentResult(
        "planned",
        out,
        estimate_usd=sum(e.cost_usd for e in pending),
        ceiling_usd=sum(e.ceiling_usd for e in pending),
        spent_usd=state.spent_usd(step_ids),
        estimate_s=sum(t for t in times.values() if t is not None) if times else None,
    )
    if dry_run:
        return result
    if recipe.gepa is not None:
        require_gepa()  # after the plan: a dry run shows GEPA's cost without the package installed
    out.mkdir(parents=True, exist_ok=True)
    (out / "recipe.yaml").write_text(
        dump_config(recipe), encoding="utf-8"
    )  # as run, overrides applied, secrets scrubbed
    state.recipe = recipe.name
    result.status = _run_steps(recipe, plan, state, result, budget_usd, console)
    result.spent_usd = state.spent_usd(step_ids)
    state.runs.append(
        {
            "ended": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "status": result.status,
            "actions": result.actions,
            **({"failed": result.failed} if result.failed else {}),
        }
    )
    state.save(out)
    if result.status == "completed":
        result.report = out / "report" / "report.md"
        ran = sum(action != "skipped" for action in result.actions.values())
        console.print(
            f"[green]done[/]: {ran} steps ran, {len(result.actions) - ran} skipped (complete with the same settings); "
            f"{result.report} (and report.html, accuracy.png); ${result.spent_usd:.4f} spent",
            highlight=False,
        )
        for step_id, message in result.failed.items():
            console.print(f"[yellow]{step_id} failed[/]: {message} (its row is marked in the table)", highlight=False)
        track_table(recipe, result)
    return result


def track_table(recipe: Recipe, result: ExperimentResult) -> None:
    """The experiment's table (report/table.json: a row per system, a column per eval set) and its spend, to the
    trackers `recipe.report_to` names."""
    assert result.report is not None
    table = json.loads((result.report.parent / "table.json").read_text(encoding="utf-8"))
    with open_trackers(recipe, command="experiment", out=result.out) as trackers:
        trackers.log_table("table", [dict(zip(table["headers"], row, strict=False)) for row in table["rows"]])
        ran = sum(action != "skipped" for action in result.actions.values())
        trackers.log_metrics(
            {"cost/spent_usd": result.spent_usd, "steps/ran": ran, "steps/failed": len(result.failed)}, step=0
        )


def _run_steps(
    recipe: Recipe,
    plan: list[Step],
    state: ExperimentState,
    result: ExperimentResult,
    budget_usd: float | None,
    console: Console,
) -> str:
    for index, step in enumerate(plan, start=1):
        # the report is redrawn whenever a step ran (a failed baseline retried may have succeeded)
        redraw = step.kind == "report" and any(action != "skipped" for action in result.actions.values())
        if state.is_done(step.id, step.fingerprint) and not redraw:
            result.actions[step.id] = "skipped"
            continue
        # A learn run subtracts its own earlier sessions from the budget it is given; other steps do not.
        spent = state.spent_usd([s.id for s in plan], excluding=step.id if step.kind == "learn" else None)
        left = None if budget_usd is None else budget_usd - spent
        if left is not None and left <= 0 and step.kind in ("learn", "gepa", "eval"):
            result.message = f"budget of ${budget_usd:.4f} is spent; {step.id} and later steps did not run"
            console.print(f"[yellow]{result.message}[/]. Rerun with a larger --budget-usd to continue.")
            return "budget_exceeded"
        console.rule(f"[{index}/{len(plan)}] {step.id}: {step.label}")
        state.mark_started(step.id, step.fingerprint)
        state.save(result.out)
        started, cpu_started = time.perf_counter(), time.process_time()
        outcome = _run_one(recipe, plan, state, step, left, console)
        wall_s, cpu_s = round(time.perf_counter() - started, 3), round(time.process_time() - cpu_started, 3)
        result.actions[step.id] = "ran"
        state.record_cost(step.id, outcome.cost_usd, cumulative=step.kind == "learn")
        state.save(result.out)
        if outcome.status == "failed":
            outcome.message = outcome.message.replace(f"{result.out}/", "")  # paths inside the experiment: relative
            result.actions[step.id] = "failed"
            result.failed[step.id] = outcome.message
            console.print(f"[yellow]{step.id} failed[/]: {outcome.message}", highlight=False)
            state.mark_failed(step.id, outcome.message, wall_s=wall_s, cpu_s=cpu_s)
            state.save(result.out)
            continue
        if outcome.status != "done":
            result.message = outcome.message or outcome.status
            console.print(
                f"[yellow]{step.id} stopped: {result.message}[/]. Finished steps are kept; "
                "rerun the same command to continue."
            )
            return outcome.status
        state.mark_done(step.id, wall_s=wall_s, cpu_s=cpu_s)
        state.save(result.out)
    return "completed"


def _is_baseline(recipe: Recipe, step: Step) -> bool:
    return step.kind == "finetune" or (step.kind == "eval" and step.system in recipe.finetunes)


def _run_one(
    recipe: Recipe, plan: list[Step], state: ExperimentState, step: Step, budget_usd: float | None, console: Console
) -> StepOutcome:
    if step.kind == "report":
        started = time.perf_counter()
        failures = {s.id: message for s in plan if (message := state.failure(s.id))}
        write_experiment_report(recipe, plan, step.out, failures=failures)
        return StepOutcome("done", 0.0, time.perf_counter() - started)
    failed_input = next((dep for dep in step.deps if state.failure(dep)), None)
    if failed_input is not None:
        return StepOutcome("failed", message=f"not run: {failed_input} failed")
    try:
        return RUNNERS[step.kind](step, budget_usd, console)
    except KeyboardInterrupt:
        return StepOutcome("interrupted", message="interrupted by the user")
    except BASELINE_ERRORS as exc:
        if not _is_baseline(recipe, step):
            raise
        return StepOutcome("failed", message=str(exc).splitlines()[0] if str(exc) else type(exc).__name__)


__all__ = ["ExperimentResult", "run_experiment"]
