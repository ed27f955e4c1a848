"""`tfgrpo learn`: Training-Free GRPO. A frozen model learns a library of experiences in its prompt.

For every epoch (reshuffled with the seed) and every batch of queries (one *step*):

  0. rollouts      G samples per query, the current library injected by the same renderer as eval;
                   scored by the reward (or against the group's majority answer, without ground truth).
                   Failed calls are left out; groups with < 2 valid rollouts or equal rewards are skipped.
  1. summaries     every rollout of a kept group, summarised step by step (stages/summarize.py).
  2. advantage     every kept group → operations on the library (stages/advantage.py).
  3. consolidation all operations of the batch → a final list, applied (stages/consolidate.py).

Each stage runs all its calls of the batch at once (the client bounds concurrency). Every request is
deterministic, so a resumed run replays completed work from the response cache for free and ends
with the library an uninterrupted run would have. With validation data, the library of the best
epoch (Mean@k) becomes `library.json`.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
from collections.abc import Awaitable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from experiences.apply import Budget, apply_operations
from experiences.model import Library
from experiences.store import ExperienceStore
from tfgrpo.core.answers import is_correct, majority_vote
from tfgrpo.core.datasets import Problem, load_dataset_rows
from tfgrpo.learn.config import LearnConfig
from tfgrpo.learn.guards import LeakageGuard, Screened, check_learning_data, history_records, load_declared_test_sets
from tfgrpo.learn.metrics import StepCounters, run_metrics
from tfgrpo.learn.rundir import RunDir, RunState
from tfgrpo.learn.selection import INITIAL, gate_decision, reference_step, select_best_step, selection_metrics
from tfgrpo.learn.stages import gather_all
from tfgrpo.learn.stages.advantage import GroupAnalysis, GroupRequest, analyze_group
from tfgrpo.learn.stages.consolidate import NearDuplicate, consolidate
from tfgrpo.learn.stages.summarize import Summary, SummaryRequest, summarize_rollouts
from tfgrpo.llm.client import LLMClient
from tfgrpo.llm.errors import AllRequestsFailedError, BudgetExceededError
from tfgrpo.rollout.injection import Injector
from tfgrpo.rollout.sampling import PromptSpec, Rollout, sample_group, score_group

T = TypeVar("T")


@dataclass
class StepPlan:
    step: int  # global, from 1
    epoch: int  # from 1
    batch: int  # from 1, within the epoch
    problems: list[Problem]
    last_in_epoch: bool


@dataclass
class Group:
    """One query's rollouts and what became of them."""

    problem: Problem
    experiences: str  # the library text injected into its prompt
    injected_ids: list[str]
    rollouts: list[Rollout]
    gold: str | None = None
    gold_is_pseudo: bool = False
    status: str = "kept"  # kept | homogeneous | too_few_valid | no_majority
    mean: float | None = None
    std: float | None = None


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


async def _learn_in(run: RunDir, config: LearnConfig, *, client: LLMClient | None, console: Any | None) -> LearnResult:
    from rich.console import Console

    from tfgrpo.llm.factory import build_client
    from tfgrpo.rollout.scoring import build_reward

    console = console or Console(stderr=True)
    # Everything that can fail on bad input fails here, before any LLM call.
    problems = load_problems(config, config.data)
    val_problems = load_problems(config, config.val_data, training=False) if config.val_data else []
    test_sets = load_declared_test_sets(config)
    overlap_warning = check_learning_data(config, problems, val_problems, test_sets)
    guard = LeakageGuard.for_run(config, problems, val_problems, test_sets)
    if config.reward != "judge":  # a judge needs the client; it is built below
        build_reward(config.reward)
    initial = Library.load(config.init_library) if config.init_library else Library()
    plans = plan_steps(problems, config)
    state = run.start(config)
    if state.completed_step == 0:
        run.save_initial_library(initial, state)
    library = run.load_step_library(state.completed_step)

    owns_client = client is None
    client = client or build_client(config.llm, cache_path=run.cache_path)
    reward = build_reward(config.reward, client)
    spent_before = sum(s.get("cost_usd", 0.0) for s in state.sessions)
    if config.llm.budget_usd is not None:
        client.budget_usd = max(config.llm.budget_usd - spent_before, 0.0)
    session = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "from_step": state.completed_step}
    run.log(f"{'resumed' if config.resume else 'started'} at step {state.completed_step}; {len(plans)} steps planned")
    for warning in [
        overlap_warning,
        *(guard.initial_warnings(initial) if guard and state.completed_step == 0 else []),
    ]:
        if warning:
            run.log(warning)
            console.print(f"warning: {warning}", style="yellow", highlight=False, markup=False)
    engine = Engine(
        config, client, reward, run, console, guard=guard, val_problems=val_problems, steps_planned=len(plans)
    )
    started = time.perf_counter()
    status, message = "failed", "crashed"  # until the loop finishes or stops cleanly
    try:
        with engine.progress:
            for plan in plans:
                if plan.step > state.completed_step:
                    library = await engine.run_step(plan, library, state)
                if plan.last_in_epoch:
                    state.epoch_end_step[plan.epoch] = plan.step
                    if val_problems and plan.epoch not in state.validation:
                        epoch_library = (
                            library if plan.step == state.completed_step else run.load_step_library(plan.step)
                        )
                        state.validation[plan.epoch] = await engine.validate(plan.epoch, epoch_library, val_problems)
                    run.save_state(state)
        status, message = "completed", ""
    except BudgetExceededError as exc:
        status, message = "budget_exceeded", str(exc)
    except (KeyboardInterrupt, asyncio.CancelledError):
        status, message = "interrupted", "interrupted by the user"
    finally:
        session.update(
            ended=time.strftime("%Y-%m-%dT%H:%M:%S"),
            status=status,
            to_step=state.completed_step,
            wall_time_s=round(time.perf_counter() - started, 3),
            cost_usd=client.accounting.cost_usd,
            usage=client.accounting.snapshot(),
            structured_output={"mode": client.structured_output, "fallbacks": dict(client.schema_fallbacks)},
        )
        state.sessions.append(session)
        state.status = status
        run.save_state(state)
        engine.close()
        if owns_client:
            await client.aclose()
            client.close_cache()

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


class Engine:
    """The stages of one step, wired to the client, the reward, the run directory and the progress display."""

    def __init__(
        self,
        config: LearnConfig,
        client: LLMClient,
        reward: Any,
        run: RunDir,
        console: Any,
        *,
        guard: LeakageGuard | None = None,
        val_problems: list[Problem] | None = None,
        steps_planned: int = 0,
    ):
        from tfgrpo.core.progress import stage_progress

        self.config = config
        self.client = client
        self.reward = reward
        self.run = run
        self.console = console
        self.prompt = PromptSpec(
            config.templates.rollout_system,
            config.templates.rollout_user,
            Path(config.system_prompt).read_text(encoding="utf-8") if config.system_prompt else None,
        )
        self.agent = config.agent.build() if config.agent.tools else None
        self.guard = guard
        self.val_problems = val_problems or []
        self.steps_planned = steps_planned
        self.progress = stage_progress(console)
        # The vector store lives on one worker thread: its cold start (chromadb, onnxruntime, the model)
        # runs there while the first rollouts wait on the network, and every later store call runs there
        # too, so one thread owns chromadb and the embedder and the event loop never blocks on them.
        self._store_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vector-store")
        self._store_future: Future[ExperienceStore] | None = None

    @property
    def needs_store(self) -> bool:
        return self.config.dedup or self.config.inject != "all"

    def start_store(self) -> None:
        """Begin opening the vector store in the background (a no-op once started)."""
        if self._store_future is None:
            # chromadb imports httpx; the openai SDK looks httpx up in sys.modules on every reply, and a
            # half-imported module there (from the store thread) breaks it. So it is imported here, whole.
            import httpx  # noqa: F401

            self._store_future = self._store_thread.submit(ExperienceStore.opened_warm, self.run.store_dir)

    def close(self) -> None:
        self._store_thread.shutdown(wait=True, cancel_futures=True)

    # -- one step --------------------------------------------------------------------------------------
    async def run_step(self, plan: StepPlan, library: Library, state: RunState) -> Library:
        config, started = self.config, time.perf_counter()
        usage_before = self.client.accounting.total
        usage_before = type(usage_before)(**vars(usage_before))
        counters = StepCounters(step=plan.step, epoch=plan.epoch, batch=plan.batch, queries=len(plan.problems))
        label = f"epoch {plan.epoch}/{config.epochs} · step {plan.step}"
        library = library.model_copy(deep=True)

        # Stage 0: rollouts of every query at once, scored, groups filtered.
        groups = await self.rollouts(plan, library, label)
        failed = [r for g in groups for r in g.rollouts if not r.ok]
        if failed and len(failed) == sum(len(g.rollouts) for g in groups):
            raise AllRequestsFailedError(
                f"every rollout of step {plan.step} failed ({len(failed)} calls), e.g. {failed[0].error}; "
                "check the endpoint, then continue with --resume"
            )
        kept = [g for g in groups if g.status == "kept"]
        for group in groups:
            for rollout in group.rollouts:
                if rollout.ok:
                    library.record_usage(
                        group.injected_ids, correct=None if rollout.reward is None else is_correct(rollout.reward)
                    )
        counters.count_groups(groups)
        counters.lap("rollouts")

        # Stage 1: every valid rollout of every kept group summarised at once.
        requests = [
            SummaryRequest(r, g.problem.problem, g.experiences, g.gold, g.gold_is_pseudo)
            for g in kept
            for r in g.rollouts
            if r.ok
        ]
        summaries = await self.summaries(f"{label} · summaries", requests)
        counters.count_summaries(summaries)
        counters.lap("summaries")

        # Stage 2: every kept group's semantic advantage at once.
        library_text = self.render_all(library)
        group_requests = []
        for group in kept:
            usable = [s for s in summaries if s.rollout.query_id == group.problem.id and s.text]
            if len(usable) >= min(2, config.group_size):
                group_requests.append(
                    GroupRequest(group.problem.id, group.problem.problem, group.gold, group.gold_is_pseudo, usable)
                )
            else:
                counters.groups_skipped_no_summaries += 1
        analyses = await self.tracked(
            f"{label} · group advantage",
            [
                analyze_group(
                    self.client,
                    request,
                    library=library,
                    library_text=library_text,
                    template=config.templates.group_advantage,
                    sampling=config.stage_sampling,
                    max_ops=config.max_ops_per_group,
                    max_words=config.max_words,
                )
                for request in group_requests
            ],
        )
        counters.count_analyses(analyses)
        counters.lap("group_advantage")

        # Stage 3: one consolidation of the batch's proposals, applied to the library.
        near = await self.near_duplicates(library, analyses)
        consolidation = (
            await self.tracked(
                f"{label} · consolidation",
                [
                    consolidate(
                        self.client,
                        analyses,
                        library=library,
                        library_text=library_text,
                        near_duplicates=near,
                        template=config.templates.consolidate,
                        sampling=config.stage_sampling,
                        max_words=config.max_words,
                        on_failure=config.on_consolidation_failure,
                    )
                ],
            )
        )[0]
        # Leakage guard: operations that contain a gold answer or copy a problem are rejected or flagged.
        screened = (
            await asyncio.to_thread(self.guard.screen, consolidation.final)
            if self.guard
            else Screened(list(consolidation.final))
        )
        applied = apply_operations(
            library,
            screened.kept,
            step=plan.step,
            provenance={
                "run": self.run.root.name,
                "epoch": plan.epoch,
                "step": plan.step,
                "batch": plan.batch,
                "query_ids": [a.query_id for a in analyses if a.reply.operations],
            },
            max_words=config.max_words,
            budget=Budget(max_items=config.max_experiences, max_prompt_tokens=config.max_library_tokens)
            if config.max_experiences or config.max_library_tokens
            else None,
        )
        counters.count_consolidation(consolidation, applied)
        counters.count_leakage(screened.records)
        counters.lap("consolidation")
        new_library, gate_records = applied.library, []
        if self.val_problems and (config.select_by == "step" or config.gate):
            new_library, gate_records = await self.validate_step(plan, library, applied, state, counters)
            counters.lap("validation")

        counters.finish(usage_before, self.client.accounting.total, time.perf_counter() - started, new_library)
        context = {"epoch": plan.epoch, "step": plan.step, "batch": plan.batch}
        self.run.commit_step(
            state,
            step=plan.step,
            library=new_library,
            rollout_rows=[self.rollout_row(g, r, library, plan) for g in groups for r in g.rollouts],
            stage_rows={
                "summaries": [{**context, **s.to_row()} for s in summaries],
                "group_ops": [{**context, **a.to_row()} for a in analyses],
                "consolidation": [{**context, **consolidation.to_row(), "apply": applied.log_records()}]
                if consolidation.reply
                else [],
            },
            step_metrics=counters.as_dict(),
            library_records=history_records(screened) + (gate_records or applied.log_records()),
        )
        self.run.log(counters.one_line())
        self.console.print(counters.one_line(), highlight=False)
        return new_library

    async def rollouts(self, plan: StepPlan, library: Library, label: str) -> list[Group]:
        config = self.config
        injector = Injector(
            library=library, spec=config.inject, store=await self.store(library) if config.inject != "all" else None
        )

        async def one(problem: Problem) -> Group:
            chosen = injector.select(problem.problem)
            experiences = injector.text_for(problem.problem, chosen)
            messages = self.prompt.messages(problem.problem, experiences)
            rollouts = await sample_group(
                self.client,
                problem.id,
                messages,
                n=config.group_size,
                sampling=config.rollout_sampling,
                tag="rollout",
                agent=self.agent,
                # each epoch draws fresh samples of a prompt (cache keys include the index); a rerun the same ones
                sample_offset=(plan.epoch - 1) * config.group_size,
            )
            if self.needs_store and (len(library) or plan.step < self.steps_planned):
                # Dedup needs the store once the library has items (a later step, or a given library): it
                # loads now, with the first wave on the wire (no start-up CPU taken from the first
                # requests) and long before it is needed; a one-step run from scratch never loads it.
                self.start_store()
            group = Group(problem, experiences, [e.id for e in chosen], rollouts)
            await asyncio.to_thread(self.score, group)
            return group

        return await self.tracked(f"{label} · rollouts", [one(p) for p in plan.problems], weight=config.group_size)

    def score(self, group: Group) -> None:
        """Rewards for the valid rollouts, then whether the group can teach anything."""
        valid = [r for r in group.rollouts if r.ok]
        if len(valid) < min(2, self.config.group_size):
            group.status = "too_few_valid"
            return
        if self.config.ground_truth:
            group.gold = group.problem.answer
        else:
            from rewards.extraction import extract_answer

            # the shared majority rule (ties to the answer voted first), so the pseudo-label is maj@k's answer
            vote = majority_vote([extract_answer(r.completion) for r in valid])
            group.gold, group.gold_is_pseudo = (None if vote is None else vote.first), True
            if group.gold is None:
                group.status = "no_majority"
                return
        score_group(self.reward, group.rollouts, group.gold, {"problem": group.problem.problem})
        # An unscorable rollout (reward None) is no evidence either way: left out like a failed call.
        rewards = [r.reward for r in valid if r.reward is not None]
        if len(rewards) < min(2, self.config.group_size):
            group.status = "too_few_valid"
            return
        group.mean, group.std = statistics.fmean(rewards), statistics.pstdev(rewards)
        if self.config.group_size > 1 and group.std <= self.config.std_threshold:
            group.status = "homogeneous"

    async def summaries(self, description: str, requests: list[SummaryRequest]) -> list[Summary]:
        task_id = self.progress.add_task(description, total=len(requests))
        try:
            return await summarize_rollouts(
                self.client,
                requests,
                template=self.config.templates.summarize,
                sampling=self.config.stage_sampling,
                token_budget=self.config.trajectory_token_budget,
                on_done=lambda k: self.progress.advance(task_id, k),
            )
        finally:
            self.progress.remove_task(task_id)

    # -- validation ------------------------------------------------------------------------------------
    async def validate_step(
        self, plan: StepPlan, before: Library, applied: Any, state: RunState, counters: StepCounters
    ) -> tuple[Library, list[dict[str, Any]]]:
        """Validate the step's candidate library; with the gate, keep it only if validation did not drop beyond noise."""
        candidate = await self.validate(plan.epoch, applied.library, self.val_problems, label=f"step {plan.step}")
        record = {**candidate, "step": plan.step}
        counters.val_mean_at_k = candidate["mean_at_k"]
        if self.config.gate:
            ref_step = reference_step(state.step_validation, plan.step)
            if ref_step is None:  # the starting library, validated once (free on a rerun: cached)
                ref_step = INITIAL
                start = self.run.load_step_library(INITIAL)
                state.step_validation[INITIAL] = {
                    **await self.validate(0, start, self.val_problems, label="start"),
                    "step": INITIAL,
                }
            decision = gate_decision(
                state.step_validation[ref_step]["per_problem"], candidate["per_problem"], seed=self.config.seed
            )
            record.update(gate=decision["decision"], gate_reference_step=ref_step)
            counters.gate = {**decision, "reference_step": ref_step}
            self.run.log(f"gate after step {plan.step}: {decision['decision']} ({decision['reason']})")
        state.step_validation[plan.step] = record
        if record.get("gate") != "rejected":
            return applied.library, []
        before.next_id = max(before.next_id, applied.library.next_id)  # ids of rejected lessons are never reused
        reason = f"gate: {counters.gate['reason']}, Δ {counters.gate['diff']:+.3f} CI {counters.gate['ci95']}"
        return before, [
            {"kind": "rejected", "op": item.operation.to_wire(), "reason": reason} for item in applied.applied
        ]

    async def validate(
        self, epoch: int, library: Library, problems: list[Problem], *, label: str | None = None
    ) -> dict[str, Any]:
        """Mean@k of this epoch's library on the validation problems (failed calls left out)."""
        from tfgrpo.core.metrics import mean_at_k

        config = self.config
        injector = Injector(
            library=library, spec=config.inject, store=await self.store(library) if config.inject != "all" else None
        )
        before = self.client.accounting.total.cost_usd

        async def one(problem: Problem) -> list[Rollout]:
            messages = self.prompt.messages(problem.problem, injector.text_for(problem.problem))
            rollouts = await sample_group(
                self.client,
                problem.id,
                messages,
                n=config.val_samples,
                sampling=config.rollout_sampling,
                tag="validation",
                agent=self.agent,
            )
            await asyncio.to_thread(score_group, self.reward, rollouts, problem.answer, {"problem": problem.problem})
            return rollouts

        label = label or f"epoch {epoch}"
        groups = await self.tracked(f"{label} · validation", [one(p) for p in problems], weight=config.val_samples)
        pairs = [(sum(r.ok for r in g), sum(r.ok and is_correct(r.reward) for r in g)) for g in groups]
        scored = [(n, c) for n, c in pairs if n > 0]
        result = {
            "epoch": epoch,
            "mean_at_k": mean_at_k(scored) if scored else None,
            "k": config.val_samples,
            "problems": len(problems),
            "failed_samples": sum(config.val_samples - n for n, _ in pairs),
            "library_version": library.version,
            "library_size": len(library),
            "cost_usd": self.client.accounting.total.cost_usd - before,
            # each problem's share of correct samples: the gate's paired test and the Pareto view use it
            "per_problem": {p.id: c / n for p, (n, c) in zip(problems, pairs, strict=False) if n > 0},
        }
        self.run.log(f"validation after {label}: Mean@{config.val_samples} = {result['mean_at_k']}")
        return result

    # -- helpers ---------------------------------------------------------------------------------------
    async def tracked(self, description: str, coroutines: Iterable[Awaitable[T]], *, weight: int = 1) -> list[T]:
        """Run all at once under one progress bar; on any failure the rest are cancelled, not orphaned."""
        coroutines = list(coroutines)
        task_id = self.progress.add_task(description, total=len(coroutines) * weight)

        async def one(coroutine: Awaitable[T]) -> T:
            result = await coroutine
            self.progress.advance(task_id, weight)
            return result

        try:
            return await gather_all(one(c) for c in coroutines)
        finally:
            self.progress.remove_task(task_id)  # one live bar per running stage; finished steps print one line

    async def store(self, library: Library) -> ExperienceStore:
        """The vector store, in step with `library` (waits for the background load if still running)."""
        self.start_store()
        store = await asyncio.wrap_future(self._store_future)
        await self.on_store_thread(store.sync, library)
        return store

    async def on_store_thread(self, function: Any, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._store_thread, lambda: function(*args, **kwargs))

    def render_all(self, library: Library) -> str:
        from experiences.render import render

        return render(library)

    async def near_duplicates(self, library: Library, analyses: list[GroupAnalysis]) -> list[NearDuplicate]:
        """Proposed texts very close to an existing experience, for stage 3 to merge instead of copying."""
        texts = [op.experience for a in analyses for op in a.reply.operations if hasattr(op, "experience")]
        if not (self.config.dedup and texts and len(library)):
            return []
        store = await self.store(library)
        matches = await self.on_store_thread(store.query_many, texts, k=1)
        return [
            NearDuplicate(text=text, id=found[0].id, similarity=round(found[0].similarity, 2))
            for text, found in zip(texts, matches, strict=False)
            if found and found[0].similarity >= self.config.dedup_threshold
        ]

    def rollout_row(self, group: Group, rollout: Rollout, library: Library, plan: StepPlan) -> dict[str, Any]:
        return {
            "run": self.run.root.name,
            "epoch": plan.epoch,
            "step": plan.step,
            "batch": plan.batch,
            "problem": group.problem.problem,
            "answer": group.problem.answer,
            **rollout.to_row(),
            "library_version": library.version,
            "group_mean": group.mean,
            "group_std": group.std,
            "group_status": group.status,
            "pseudo_label": group.gold if group.gold_is_pseudo else None,
        }


__all__ = ["Engine", "LearnResult", "StepPlan", "learn", "learn_async", "plan_steps", "select_best_epoch"]
