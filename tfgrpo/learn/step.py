"""One learning step: a batch of queries turned into a new library, stage by stage.

  0. rollouts       G samples per query with the library injected (each experience left out of a rollout's
                    prompt at random: tfgrpo.learn.credit), scored, groups filtered
  credit            every group's with/without contrasts added to its experiences' credit; those measured
                    to hurt are retired by this step's apply
  1. summaries      every valid rollout of a kept group, summarised (stages/summarize.py)
  2. advantage      every kept group → operations on the library (stages/advantage.py)
  3. consolidation  the batch's operations → one final list, screened for leakage, applied
  (validation)      with `select_by: step` or the gate: the candidate library validated, maybe rejected
  write             library, rollouts, stage replies and metrics written to the run directory at once

Stages 0-2 run for every query at once, each query going on to its next stage as soon as its own previous
one is done, so no stage waits for the batch's slowest reply of the stage before; the consolidation waits
for all of them. The client bounds concurrency.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tfgrpo.core.datasets import Problem
from tfgrpo.core.progress import progress_task, stage_progress
from tfgrpo.experiences.apply import ApplyResult, Budget, apply_operations
from tfgrpo.experiences.model import Experience, Library
from tfgrpo.experiences.ops import DeleteOp, Operation
from tfgrpo.experiences.render import render
from tfgrpo.learn import credit
from tfgrpo.learn.config import LearnConfig
from tfgrpo.learn.groups import Group, assess_group, record_usage
from tfgrpo.learn.guards import LeakageGuard, Screened, history_records
from tfgrpo.learn.metrics import StepCounters
from tfgrpo.learn.query_stages import QueryOutcome, StageTracker
from tfgrpo.learn.rundir import RunDir, RunState, rollout_row
from tfgrpo.learn.stages.advantage import GroupAnalysis, GroupRequest, analyze_group
from tfgrpo.learn.stages.consolidate import Consolidation, NearDuplicate, consolidate
from tfgrpo.learn.stages.summarize import Summary, SummaryRequest, summarize_rollouts
from tfgrpo.learn.validation import Validator
from tfgrpo.learn.vector_store import VectorStore
from tfgrpo.llm.client import LLMClient
from tfgrpo.llm.errors import AllRequestsFailedError
from tfgrpo.llm.types import SamplingParams
from tfgrpo.rollout.sampling import PromptSpec, gather_all, sample_group

if TYPE_CHECKING:  # the store's modules load with the first step that uses the store
    from tfgrpo.experiences.dedup import Folded

T = TypeVar("T")


@dataclass
class StepPlan:
    step: int  # global, from 1
    epoch: int  # from 1
    batch: int  # from 1, within the epoch
    problems: list[Problem]
    last_in_epoch: bool


@dataclass
class StepOutputs:
    """What the stages of one step produced: everything the run directory records for it."""

    groups: list[Group]
    summaries: list[Summary]
    analyses: list[GroupAnalysis]
    consolidation: Consolidation
    screened: Screened
    applied: ApplyResult
    retired: list[dict[str, Any]]  # history records of the experiences credit retired


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
    ):
        self.config = config
        self.client = client
        self.run = run
        self.console = console
        self.progress = stage_progress(console)
        self.guard = guard
        self.reward = reward
        self.prompt = PromptSpec(
            config.templates.rollout_system,
            config.templates.rollout_user,
            Path(config.system_prompt).read_text(encoding="utf-8") if config.system_prompt else None,
        )
        self.agent = config.agent.build() if config.agent.tools else None
        self.store = VectorStore(run.store_dir)
        self.validator = Validator(
            config, client, reward, self.prompt, self.agent, run, self.store, self.progress, val_problems or []
        )

    @property
    def summary_sampling(self) -> SamplingParams:
        if self.config.summary_max_tokens is None:
            return self.config.stage_sampling
        return self.config.stage_sampling.model_copy(update={"max_tokens": self.config.summary_max_tokens})

    def close(self) -> None:
        self.store.close()

    async def run_step(self, plan: StepPlan, library: Library, state: RunState) -> Library:
        """Run the stages of one step on `library` and write the step; returns the library it ends with."""
        config, started = self.config, time.perf_counter()
        usage_before = self.client.accounting.total  # a copy: the totals of this moment
        counters = StepCounters(step=plan.step, epoch=plan.epoch, batch=plan.batch, queries=len(plan.problems))
        label = f"epoch {plan.epoch}/{config.epochs} · step {plan.step}"
        library = library.model_copy(deep=True)
        library_text = render(library)  # what stages 2 and 3 show of the library the step started with

        outcomes = await self.query_stages(plan, library, library_text, label, counters)
        groups = [o.group for o in outcomes]
        summaries = [s for o in outcomes for s in o.summaries]
        analyses = [o.analysis for o in outcomes if o.analysis is not None]
        retiring = credit.measure(config, library, groups, counters, state.steps[-1] if state.steps else None)
        if counters.reward_collapse:
            self.console.print(credit.collapse_line(counters.reward_collapse), highlight=False)
        consolidation, screened, applied = await self.consolidation_stage(
            plan, label, analyses, library, library_text, counters, retiring
        )
        retired = credit.retire(config, applied, retiring, plan.step, counters)
        new_library, gate_records = applied.library, []
        if self.validator.problems and (config.select_by == "step" or config.gate):
            new_library, gate_records = await self.validator.validate_step(
                plan.step, plan.epoch, library, applied, state, counters
            )
            counters.lap("validation")

        counters.finish(usage_before, self.client.accounting.total, time.perf_counter() - started, new_library)
        outputs = StepOutputs(groups, summaries, analyses, consolidation, screened, applied, retired)
        self.write_step(plan, state, counters, library, new_library, outputs, gate_records)
        self.store.replace_if_grown(new_library)
        return new_library

    def write_step(
        self,
        plan: StepPlan,
        state: RunState,
        counters: StepCounters,
        before: Library,
        after: Library,
        outputs: StepOutputs,
        gate_records: list[dict[str, Any]],
    ) -> None:
        """The step's rows, library and metrics to the run directory, the step marked completed last."""
        context = {"epoch": plan.epoch, "step": plan.step, "batch": plan.batch}
        run, consolidation, applied = self.run, outputs.consolidation, outputs.applied
        run.write_step(
            state,
            step=plan.step,
            library=after,
            rollout_rows=[rollout_row(run, g, r, before, context) for g in outputs.groups for r in g.rollouts],
            stage_rows={
                "summaries": [{**context, **s.to_row()} for s in outputs.summaries],
                "group_ops": [{**context, **a.to_row()} for a in outputs.analyses],
                "consolidation": [{**context, **consolidation.to_row(), "apply": applied.log_records()}]
                if consolidation.reply
                else [],
            },
            step_metrics=counters.as_dict(),
            library_records=history_records(outputs.screened)
            + (gate_records or [*applied.log_records(), *outputs.retired]),
        )
        run.log(counters.one_line())
        self.console.print(counters.one_line(), highlight=False)

    # -- stages 0-2: each query's rollouts, summaries and group analysis ------------------------------------
    async def query_stages(
        self, plan: StepPlan, library: Library, library_text: str, label: str, counters: StepCounters
    ) -> list[QueryOutcome]:
        """Stages 0-2 of every query at once, each query going on as soon as its own previous stage is done
        (tfgrpo.learn.query_stages); the library records which experiences each rollout had in context."""
        config = self.config
        injector = await self.store.injector(library, config.inject)
        stages = StageTracker(self.progress, label, counters, queries=len(plan.problems), group_size=config.group_size)

        async def one(problem: Problem) -> QueryOutcome:
            group = await self.rollout_group(plan, problem, injector)
            record_usage(library, group)
            stages.advance("rollouts", config.group_size)
            stages.query_done("rollouts")
            summaries = await self.summarize_group(group, stages) if group.status == "kept" else []
            stages.query_done("summaries")
            analysis = (
                await self.analyze(group, summaries, library, library_text, stages, counters) if summaries else None
            )
            stages.query_done("group_advantage")
            return QueryOutcome(group, summaries, analysis)

        try:
            outcomes = await gather_all(one(p) for p in plan.problems)
        finally:
            stages.close()
        rollouts = [r for o in outcomes for r in o.group.rollouts]
        if rollouts and not any(r.ok for r in rollouts):
            failed = rollouts[0]
            raise AllRequestsFailedError(
                f"every rollout of step {plan.step} failed ({len(rollouts)} calls), e.g. {failed.error}; "
                "check the endpoint, then continue with --resume"
            )
        counters.count_groups([o.group for o in outcomes])
        counters.count_summaries([s for o in outcomes for s in o.summaries])
        counters.count_analyses([o.analysis for o in outcomes if o.analysis is not None])
        return outcomes

    async def rollout_group(self, plan: StepPlan, problem: Problem, injector: Any) -> Group:
        """Stage 0 of one query: G samples with the library injected, scored, the group assessed."""
        config = self.config
        chosen = injector.select(problem.problem)
        experiences = injector.text_for(problem.problem, chosen)
        # each epoch draws fresh samples of a prompt (cache keys include the index); a rerun the same ones
        offset = (plan.epoch - 1) * config.group_size
        variants = credit.leave_out_variants(config, plan.step, self.prompt, problem, injector, chosen, offset)
        rollouts = await sample_group(
            self.client,
            problem.id,
            self.prompt.messages(problem.problem, experiences),
            n=config.group_size,
            sampling=config.rollout_sampling,
            tag="rollout",
            agent=self.agent,
            sample_offset=offset,
            variants={index: (messages, left) for index, (messages, _, left) in variants.items()},
        )
        group = Group(problem, experiences, [e.id for e in chosen], rollouts)
        group.sample_experiences = {index: text for index, (_, text, _) in variants.items()}
        await asyncio.to_thread(assess_group, group, self.reward, config)
        return group

    async def summarize_group(self, group: Group, stages: StageTracker) -> list[Summary]:
        """Stage 1 of one kept query: every valid rollout summarised."""
        requests = [
            SummaryRequest(
                r,
                group.problem.problem,
                group.sample_experiences.get(r.sample, group.experiences),
                group.gold,
                group.gold_is_pseudo,
            )
            for r in group.rollouts
            if r.ok
        ]
        stages.expect("summaries", len(requests))
        return await summarize_rollouts(
            self.client,
            requests,
            template=self.config.templates.summarize,
            sampling=self.summary_sampling,
            token_budget=self.config.trajectory_token_budget,
            on_done=lambda done: stages.advance("summaries", done),
        )

    async def analyze(
        self,
        group: Group,
        summaries: list[Summary],
        library: Library,
        library_text: str,
        stages: StageTracker,
        counters: StepCounters,
    ) -> GroupAnalysis | None:
        """Stage 2 of one query with enough summaries: its semantic advantage as operations on the library."""
        config = self.config
        usable = [s for s in summaries if s.text]
        if len(usable) < min(2, config.group_size):
            counters.groups_skipped_no_summaries += 1
            return None
        stages.expect("group_advantage", 1)
        problem = group.problem
        analysis = await analyze_group(
            self.client,
            GroupRequest(problem.id, problem.problem, group.gold, group.gold_is_pseudo, usable),
            library=library,
            library_text=library_text,
            template=config.templates.group_advantage,
            sampling=config.stage_sampling,
            max_ops=config.max_ops_per_group,
            max_words=config.max_words,
        )
        stages.advance("group_advantage")
        return analysis

    # -- stage 3: consolidation ------------------------------------------------------------------------
    async def consolidation_stage(
        self,
        plan: StepPlan,
        label: str,
        analyses: list[GroupAnalysis],
        library: Library,
        library_text: str,
        counters: StepCounters,
        retiring: list[Experience],
    ) -> tuple[Consolidation, Screened, ApplyResult]:
        """One consolidation of the batch's proposals, screened for leakage, applied to the library after the
        deletes of the experiences credit retires."""
        config = self.config
        near = await self.near_duplicates(library, analyses)
        (consolidation,) = await self.tracked(
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
        # Leakage guard: operations that contain a gold answer or copy a problem are rejected or flagged.
        screened = (
            await asyncio.to_thread(
                self.guard.screen, consolidation.final, [(a.query_id, a.reply.operations) for a in analyses]
            )
            if self.guard
            else Screened(list(consolidation.final))
        )
        kept = credit.keep_rewrites(library, screened.kept, counters) if config.credit_leave_out else screened.kept
        folded = await self.enforce_dedup(library, kept)
        applied = apply_operations(
            library,
            [*(DeleteOp(id=e.id) for e in retiring), *folded.operations],
            step=plan.step,
            provenance={
                "run": self.run.root.name,
                "epoch": plan.epoch,
                "step": plan.step,
                "batch": plan.batch,
                "query_ids": [a.query_id for a in analyses if a.reply.operations],
            },
            max_words=config.max_words,
            require_sentence=config.require_sentences,
            budget=Budget(max_items=config.max_experiences, max_prompt_tokens=config.max_library_tokens)
            if config.max_experiences or config.max_library_tokens
            else None,
        )
        counters.count_consolidation(consolidation, applied)
        counters.count_leakage(screened.records)
        folded.remember_aliases(applied.library, applied)
        counters.count_dedup([decision.model_dump() for decision in folded.decisions])
        counters.lap("consolidation")
        return consolidation, screened, applied

    async def enforce_dedup(self, library: Library, operations: list[Operation]) -> Folded:
        """`dedup: enforce`: near-duplicate adds and modifies folded into their neighbours (experiences.dedup)."""
        from tfgrpo.experiences.dedup import Folded  # with the store's modules: loaded once a step consolidates

        if self.config.dedup != "enforce" or not operations:
            return Folded(list(operations))
        return await self.store.fold_duplicates(library, operations, self.config.dedup_enforce_threshold)

    async def near_duplicates(self, library: Library, analyses: list[GroupAnalysis]) -> list[NearDuplicate]:
        """Proposed texts very close to an existing experience, for stage 3 to merge instead of copying."""
        texts = [op.experience for a in analyses for op in a.reply.operations if hasattr(op, "experience")]
        if not (self.config.dedup != "off" and texts and len(library)):
            return []
        return await self.store.near_duplicates(library, texts, self.config.dedup_threshold)

    # -- helpers ---------------------------------------------------------------------------------------
    async def tracked(self, description: str, coroutines: Iterable[Awaitable[T]], *, weight: int = 1) -> list[T]:
        """Run all at once under one progress bar; on any failure the rest are cancelled, not orphaned."""
        coroutines = list(coroutines)
        with progress_task(self.progress, description, len(coroutines) * weight) as advance:

            async def one(coroutine: Awaitable[T]) -> T:
                result = await coroutine
                advance(weight)
                return result

            return await gather_all(one(c) for c in coroutines)


__all__ = ["Engine", "Group", "StepOutputs", "StepPlan"]
