"""Run one step of an experiment through the library function behind its command.

Each runner returns a `StepOutcome`; a budget cap reached or a Ctrl-C is an outcome, not an error, so the
experiment stops cleanly with every finished step recorded. A step's own run directory makes it
resumable: a learn run continues from its last completed step, an eval replays its response cache.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfgrpo.core.config import config_dict, read_yaml
from tfgrpo.eval.runner import evaluate_async
from tfgrpo.experiment.gepa_run import METRICS_FILE, PROMPT_FILE, run_gepa
from tfgrpo.experiment.plan import Step, stable_dict
from tfgrpo.finetune.run import SUMMARY_FILE, run_finetune
from tfgrpo.learn.loop import learn
from tfgrpo.llm.client import LLMClient
from tfgrpo.llm.errors import BudgetExceededError
from tfgrpo.llm.factory import build_client


@dataclass
class StepOutcome:
    status: str  # done | budget_exceeded | interrupted
    cost_usd: float = 0.0
    wall_s: float = 0.0
    message: str = ""


def _with_budget(config: Any, budget_usd: float | None) -> Any:
    return config.model_copy(update={"llm": config.llm.model_copy(update={"budget_usd": budget_usd})})


def can_resume_learn(run_dir: Path, config: Any) -> bool:
    """The run in `run_dir` has the same settings, or only fewer epochs (a resumed run adds the new ones)."""
    if not (run_dir / "state.json").is_file() or not (run_dir / "config.yaml").is_file():
        return False
    drop = ("out", "resume")
    saved = stable_dict(read_yaml(run_dir / "config.yaml"), drop)
    current = stable_dict(config_dict(config), drop)  # as config.yaml wrote it: URL query strings masked
    if saved == current:
        return True
    saved_epochs, current_epochs = saved.pop("epochs", None), current.pop("epochs", None)
    return saved == current and isinstance(saved_epochs, int) and current_epochs >= saved_epochs


def run_learn_step(step: Step, budget_usd: float | None, console: Any) -> StepOutcome:
    """Resume the learn run in the step's folder when its saved settings allow it; otherwise start afresh."""
    resume = can_resume_learn(step.out, step.config)
    if step.out.exists() and not resume:
        shutil.rmtree(step.out)  # settings changed: the old run answers a different question
    config = _with_budget(step.config, budget_usd).model_copy(update={"resume": resume})
    started = time.perf_counter()
    result = learn(config, console=console)
    totals = result.metrics.get("totals") or {}
    outcome = {"completed": "done", "budget_exceeded": "budget_exceeded"}.get(result.status, "interrupted")
    return StepOutcome(outcome, float(totals.get("cost_usd") or 0.0), time.perf_counter() - started, result.message)


async def _evaluate_with(config: Any, client: LLMClient, console: Any) -> Any:
    try:
        return await evaluate_async(config, client=client, console=console)
    finally:
        await client.aclose()
        client.close_cache()


def run_eval_step(step: Step, budget_usd: float | None, console: Any) -> StepOutcome:
    """The eval folder is kept across setting changes: its response cache makes samples already drawn free.

    The client is built here so that what an eval stopped by the budget had spent is still known."""
    config = _with_budget(step.config, budget_usd)
    step.out.mkdir(parents=True, exist_ok=True)
    client = build_client(config.llm, cache_path=step.out / "cache.sqlite")
    started = time.perf_counter()
    try:
        asyncio.run(_evaluate_with(config, client, console))
    except BudgetExceededError as exc:
        return StepOutcome("budget_exceeded", client.accounting.cost_usd, time.perf_counter() - started, str(exc))
    except KeyboardInterrupt:
        return StepOutcome(
            "interrupted", client.accounting.cost_usd, time.perf_counter() - started, "interrupted by the user"
        )
    return StepOutcome("done", client.accounting.cost_usd, time.perf_counter() - started)


def can_resume_gepa(run_dir: Path, config: Any) -> bool:
    """GEPA's folder was written with the same settings: its state and response cache carry on."""
    if not (run_dir / "config.yaml").is_file():
        return False
    drop = ("out",)
    return stable_dict(read_yaml(run_dir / "config.yaml"), drop) == stable_dict(config_dict(config), drop)


def run_gepa_step(step: Step, budget_usd: float | None, console: Any) -> StepOutcome:
    """GEPA resumes from its folder (its state, and the response cache for the iteration it was in); a folder
    written with other settings is removed first."""
    if step.out.exists() and not can_resume_gepa(step.out, step.config):
        shutil.rmtree(step.out)
    config = _with_budget(step.config, budget_usd)
    if config.reflection_llm is not None:
        config = config.model_copy(
            update={"reflection_llm": config.reflection_llm.model_copy(update={"budget_usd": budget_usd})}
        )
    console.print(
        f"GEPA on {config.data}: at most {config.max_metric_calls} metric calls, minibatch "
        f"{config.reflection_minibatch_size}, validation: {config.val_data or 'the training problems'}",
        highlight=False,
    )
    started = time.perf_counter()
    try:
        metrics = run_gepa(config)
    except BudgetExceededError as exc:
        spent = (read_json(step.out / METRICS_FILE).get("sessions") or [{}])[-1].get("cost_usd") or 0.0
        return StepOutcome("budget_exceeded", float(spent), time.perf_counter() - started, str(exc))
    totals = metrics["totals"]
    console.print(
        f"GEPA: {totals['metric_calls']} metric calls, {totals['reflections']} reflections, "
        f"{totals['candidates']} candidates; prompt in {step.out / PROMPT_FILE}",
        highlight=False,
    )
    return StepOutcome("done", float(metrics["sessions"][-1]["cost_usd"]), time.perf_counter() - started)


def run_finetune_step(step: Step, budget_usd: float | None, console: Any) -> StepOutcome:
    """Fine-tuning has no resume: an unfinished or outdated folder is trained again from the start."""
    if step.out.exists():
        shutil.rmtree(step.out)
    arguments = step.config
    console.print(
        f"finetune {arguments['method']} model={arguments['model'] or 'embedded SmolLM2'} data={arguments['data']}",
        highlight=False,
    )
    started = time.perf_counter()
    run_finetune(
        arguments["method"],
        data=arguments["data"],
        out=step.out,
        model=arguments["model"],
        options=dict(arguments["options"]),
    )
    return StepOutcome("done", 0.0, time.perf_counter() - started)


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def training_numbers(step: Step) -> tuple[float | None, float | None, int | None]:
    """(cost USD, wall seconds, tokens) of a finished learn or finetune step, from its own run directory.

    Tokens: a learn or GEPA run's prompt + completion tokens over all its calls; a fine-tune's tokens through the
    model in training (TRL's count: prompts included, for RL methods the generated batches)."""
    if step.kind in ("learn", "gepa"):
        totals = read_json(step.out / "metrics.json").get("totals") or {}
        tokens = (totals.get("prompt_tokens") or 0) + (totals.get("completion_tokens") or 0) if totals else None
        return totals.get("cost_usd"), totals.get("wall_time_s"), tokens
    summary = read_json(step.out / SUMMARY_FILE)
    return (0.0 if summary else None), summary.get("wall_time_s"), summary.get("tokens_processed")


__all__ = [
    "StepOutcome",
    "run_eval_step",
    "run_finetune_step",
    "run_gepa_step",
    "run_learn_step",
    "training_numbers",
]
