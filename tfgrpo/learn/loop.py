"""`tfgrpo learn`: Training-Free GRPO. A frozen model learns a library of experiences in its prompt.

For every epoch (reshuffled with the seed) and every batch of queries (one *step*, `tfgrpo.learn.step`):

  0. rollouts      G samples per query, the current library injected by the same renderer as eval;
                   scored by the reward (or against the group's majority answer, without ground truth).
                   Failed calls are left out; groups with < 2 valid rollouts or equal rewards are skipped.
  1. summaries     every rollout of a kept group, summarised step by step (stages/summarize.py).
  2. advantage     every kept group → operations on the library (stages/advantage.py).
  3. consolidation all operations of the batch → a final list, applied (stages/consolidate.py).

This module is the run around the steps: read and check the inputs, open (or resume) the run
directory, run the planned steps and the end-of-epoch validation (`tfgrpo.learn.validation`), record the
session, choose the final library. Every request is deterministic, so a resumed run replays completed
work from the response cache for free and ends with the library an uninterrupted run would have. With
validation data, the library of the best epoch (Mean@k) becomes `library.json`.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from tfgrpo.core.atomic import removed_on_failure
from tfgrpo.core.datasets import Problem, dataset_cache_dir, load_dataset_rows
from tfgrpo.core.tracking import Trackers, open_trackers, require_trackers, scalars
from tfgrpo.experiences.model import Library
from tfgrpo.learn.config import LearnConfig
from tfgrpo.learn.guards import LeakageGuard, check_learning_data, load_declared_test_sets
from tfgrpo.learn.metrics import run_metrics
from tfgrpo.learn.rundir import RunDir, RunState
from tfgrpo.learn.selection import select_best_step, selection_metrics
from tfgrpo.learn.step import Engine, StepPlan
from tfgrpo.learn.step_scalars import epoch_scalars, step_scalars
from tfgrpo.llm.client import LLMClient
from tfgrpo.llm.errors import BudgetExceededError
from tfgrpo.llm.factory import build_client
from tfgrpo.rollout.injection import injection_warning
from tfgrpo.rollout.scoring import build_reward


@dataclass
class LearnResult:
    out: Path
    status: str  # completed | interrupted | budget_exceeded
    library: Library
    best_epoch: int | None
    metrics: dict[str, Any] = field(default_factory=dict)
    message: str = ""

    @property
    def resume_command(self) -> str:
        return f"tfgrpo learn --out {self.out} --resume"


def learn(config: LearnConfig, *, client: LLMClient | None = None, console: Any | None = None) -> LearnResult:
    """Run (or resume) a learn run end to end; returns how it ended. Ctrl-C and the budget stop cleanly."""
    try:
        return asyncio.run(learn_async(config, client=client, console=console))
    except KeyboardInterrupt:  # raised outside any await (e.g. inside a backend): the run dir is still consistent
        run = RunDir(config.out)
        library = Library.load(run.library_path) if run.library_path.is_file() else Library()
        metrics = json.loads(run.metrics_path.read_text(encoding="utf-8")) if run.metrics_path.is_file() else {}
        return LearnResult(
            out=run.root,
            status="interrupted",
            library=library,
            best_epoch=metrics.get("best_epoch"),
            metrics=metrics,
            message="interrupted by the user",
        )


async def learn_async(
    config: LearnConfig, *, client: LLMClient | None = None, console: Any | None = None
) -> LearnResult:
    run = RunDir(config.out)
    try:
        return await _learn_in(run, config, client=client, console=console)
    finally:
        run.release()  # the run lock, taken by run.start()


@dataclass
class RunInputs:
    """What a run reads and checks before its first LLM call, so bad input costs nothing."""

    problems: list[Problem]
    val_problems: list[Problem]
    guard: LeakageGuard | None
    initial: Library
    plans: list[StepPlan]
    overlap_warning: str | None


def read_inputs(config: LearnConfig) -> RunInputs:
    """Data, validation data, declared test sets, the leakage guard, the reward, the starting library and the
    trackers' extras."""
    require_trackers(config.trackers)
    problems = load_problems(config, config.data)
    val_problems = load_problems(config, config.val_data, training=False) if config.val_data else []
    test_sets = load_declared_test_sets(config)
    overlap_warning = check_learning_data(config, problems, val_problems, test_sets)
    guard = LeakageGuard.for_run(config, problems, val_problems, test_sets)
    if config.reward != "judge":  # a judge needs the client; it is built once the run starts
        build_reward(config.reward)
    initial = Library.load(config.init_library) if config.init_library else Library()
    return RunInputs(problems, val_problems, guard, initial, plan_steps(problems, config), overlap_warning)


async def _learn_in(run: RunDir, config: LearnConfig, *, client: LLMClient | None, console: Any | None) -> LearnResult:
    console = console or Console(stderr=True)
    with removed_on_failure(run.root):  # a data cache put in a new run folder (dataset_cache: run) goes with it
        inputs = read_inputs(config)
    state = run.start(config)
    if state.completed_step == 0:
        run.save_initial_library(inputs.initial, state)

    owns_client = client is None
    client = client or build_client(config.llm, cache_path=run.cache_path)
    _remember_providers(run, state, client)
    reward = build_reward(config.reward, client)
    spent_before = sum(s.get("cost_usd", 0.0) for s in state.sessions)
    if config.llm.budget_usd is not None:
        client.budget_usd = max(config.llm.budget_usd - spent_before, 0.0)
    session = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "from_step": state.completed_step}
    run.log(
        f"{'resumed' if config.resume else 'started'} at step {state.completed_step}; {len(inputs.plans)} steps planned"
    )
    _warn(run, console, inputs, state, config)
    engine = Engine(
        config,
        client,
        reward,
        run,
        console,
        guard=inputs.guard,
        val_problems=inputs.val_problems,
    )
    started = time.perf_counter()
    status, message = "failed", "crashed"  # until the loop finishes or stops cleanly
    trackers = Trackers()
    try:
        try:
            trackers = open_trackers(config, command="learn", out=run.root)
            with engine.progress:
                await run_planned_steps(engine, run, inputs, state, trackers)
            status, message = "completed", ""
        except BudgetExceededError as exc:
            status, message = "budget_exceeded", str(exc)
        except (KeyboardInterrupt, asyncio.CancelledError):
            status, message = "interrupted", "interrupted by the user"
        finally:
            try:  # a full disk fails this write too: the client is closed all the same
                _record_session(run, state, session, client, status=status, wall_time_s=time.perf_counter() - started)
            finally:
                if owns_client:
                    await client.aclose()
                    client.close_cache()
        result = _finish(run, config, state, status, message, console)
        trackers.log_metrics(scalars(result.metrics["totals"], "totals/"), step=state.completed_step)
        trackers.log_table("credit", result.metrics["credit"])
        return result
    finally:
        trackers.close(failed=status == "failed")
        engine.close()


def _warn(run: RunDir, console: Any, inputs: RunInputs, state: RunState, config: LearnConfig) -> None:
    """Data overlaps and (on a fresh run) a starting library that already leaks or fills the prompt: logged and
    shown, not fatal."""
    fresh = state.completed_step == 0
    for warning in [
        inputs.overlap_warning,
        *(inputs.guard.initial_warnings(inputs.initial) if inputs.guard and fresh else []),
        injection_warning(inputs.initial, config.inject, str(config.init_library)) if fresh else None,
    ]:
        if warning:
            run.log(warning)
            console.print(f"warning: {warning}", style="yellow", highlight=False, markup=False)


async def run_planned_steps(
    engine: Engine, run: RunDir, inputs: RunInputs, state: RunState, trackers: Trackers
) -> None:
    """Every step not yet completed, and each epoch's validation once its last step is done; each step's final
    metrics go to the trackers."""
    library = run.load_step_library(state.completed_step)
    for plan in inputs.plans:
        if plan.step > state.completed_step:
            library = await engine.run_step(plan, library, state)
            trackers.log_metrics(step_scalars(state.steps[-1], library, engine.config), step=plan.step)
        if plan.last_in_epoch:
            state.epoch_end_step[plan.epoch] = plan.step
            if inputs.val_problems and plan.epoch not in state.validation:
                epoch_library = library if plan.step == state.completed_step else run.load_step_library(plan.step)
                state.validation[plan.epoch] = await engine.validator.validate(plan.epoch, epoch_library)
                trackers.log_metrics(epoch_scalars(state.validation[plan.epoch]), step=plan.step)
            run.save_state(state)


def _remember_providers(run: RunDir, state: RunState, client: LLMClient) -> None:
    """A resumed run starts each endpoint from the provider profile its last session learned, so it does not
    pay that endpoint's refusals (400s) again."""
    saved = next((s["provider_profiles"] for s in reversed(state.sessions) if s.get("provider_profiles")), {})
    remembered = client.remember_providers(saved)
    if remembered:
        run.log(f"provider profiles remembered from the last session for: {', '.join(remembered)}")


def _record_session(
    run: RunDir, state: RunState, session: dict[str, Any], client: LLMClient, *, status: str, wall_time_s: float
) -> None:
    """How this session ended, what it cost and what it used, saved with the run state."""
    session.update(
        ended=time.strftime("%Y-%m-%dT%H:%M:%S"),
        status=status,
        to_step=state.completed_step,
        wall_time_s=round(wall_time_s, 3),
        cost_usd=client.accounting.cost_usd,
        usage=client.accounting.snapshot(),
        structured_output={"mode": client.structured_output, "fallbacks": dict(client.schema_fallbacks)},
        providers=client.provider_profiles(),
        provider_profiles=client.provider_records(),
    )
    state.sessions.append(session)
    state.status = status
    run.save_state(state)


def _finish(run: RunDir, config: LearnConfig, state: RunState, status: str, message: str, console: Any) -> LearnResult:
    """Choose the final library (best step or epoch on validation), write metrics.json, say how to resume."""
    best_epoch = select_best_epoch(state)
    best_step = select_best_step(state.step_validation) if config.select_by == "step" else None
    if status == "completed" and best_step is not None:
        run.load_step_library(best_step).save(run.library_path)
    elif status == "completed" and best_epoch is not None:
        run.load_step_library(state.epoch_end_step[best_epoch]).save(run.library_path)
    final = Library.load(run.library_path)
    metrics = run_metrics(state, best_epoch=best_epoch, library=final, config=config)
    metrics.update(selection_metrics(state.step_validation, select_by=config.select_by))
    run.write_metrics(metrics)
    run.log(f"{status} at step {state.completed_step}{': ' + message if message else ''}")
    result = LearnResult(
        out=run.root, status=status, library=final, best_epoch=best_epoch, metrics=metrics, message=message
    )
    if status != "completed":
        console.print(f"[yellow]{message}[/]. Progress is saved; continue with: [bold]{result.resume_command}[/]")
    return result


def load_problems(config: LearnConfig, spec: str, *, training: bool = True) -> list[Problem]:
    """Training data needs no answers without ground truth (majority-vote pseudo-labels); validation does."""
    return load_dataset_rows(
        spec,
        problem_key=config.problem_key,
        answer_key=config.answer_key,
        id_key=config.id_key,
        limit=config.limit if training else None,
        require_answer=config.ground_truth or not training,
        max_row_bytes=config.max_row_bytes,
        cache_dir=dataset_cache_dir(config.dataset_cache, config.out),
        memory_mb=config.max_dataset_mb,
    )


def plan_steps(problems: list[Problem], config: LearnConfig) -> list[StepPlan]:
    """Every step of the run: each epoch shuffles the queries with (seed, epoch); the last batch may be smaller."""
    size = config.batch_size or len(problems)
    plans: list[StepPlan] = []
    for epoch in range(1, config.epochs + 1):
        order = list(problems)
        random.Random(f"{config.seed}:{epoch}").shuffle(order)
        batches = [order[i : i + size] for i in range(0, len(order), size)]
        for index, batch in enumerate(batches, start=1):
            plans.append(StepPlan(len(plans) + 1, epoch, index, batch, last_in_epoch=index == len(batches)))
    return plans


def select_best_epoch(state: RunState) -> int | None:
    """Highest validation Mean@k; ties go to the earlier epoch."""
    scored = [
        (result["mean_at_k"], -epoch, epoch)
        for epoch, result in state.validation.items()
        if result.get("mean_at_k") is not None
    ]
    return max(scored)[2] if scored else None


__all__ = [
    "LearnResult",
    "RunInputs",
    "StepPlan",
    "learn",
    "learn_async",
    "plan_steps",
    "read_inputs",
    "select_best_epoch",
]
