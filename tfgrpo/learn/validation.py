"""Validation during learning: Mean@k of a library on the validation problems, and the step gate.

The problems are sampled by `tfgrpo.rollout.sampling.sample_problems`, the same loop `tfgrpo eval` runs,
so a validation score and an eval score of the same library on the same data mean the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.progress import Progress

from tfgrpo.core.answers import is_correct
from tfgrpo.core.datasets import Problem
from tfgrpo.core.metrics import mean_at_k
from tfgrpo.core.progress import progress_task
from tfgrpo.experiences.apply import ApplyResult
from tfgrpo.experiences.model import Library
from tfgrpo.learn.config import LearnConfig
from tfgrpo.learn.metrics import StepCounters
from tfgrpo.learn.rundir import RunDir, RunState
from tfgrpo.learn.selection import INITIAL, gate_decision, reference_step
from tfgrpo.learn.vector_store import VectorStore
from tfgrpo.llm.client import LLMClient
from tfgrpo.rollout.sampling import PromptSpec, Rollout, sample_problems


@dataclass
class Validator:
    """Scores libraries on the run's validation problems with the run's prompt, reward and agent."""

    config: LearnConfig
    client: LLMClient
    reward: Any
    prompt: PromptSpec
    agent: Any | None
    run: RunDir
    store: VectorStore
    progress: Progress
    problems: list[Problem]

    async def validate(self, epoch: int, library: Library, *, label: str | None = None) -> dict[str, Any]:
        """Mean@k of `library` on the validation problems (failed calls left out)."""
        config = self.config
        injector = await self.store.injector(library, config.inject)
        before = self.client.accounting.total.cost_usd
        label = label or f"epoch {epoch}"
        with progress_task(self.progress, f"{label} · validation", len(self.problems) * config.val_samples) as advance:
            groups = await sample_problems(
                self.client,
                self.problems,
                prompt=self.prompt,
                experiences_for=injector.text_for,
                reward=self.reward,
                n=config.val_samples,
                sampling=config.rollout_sampling,
                tag="validation",
                agent=self.agent,
                on_problem_done=lambda _problem, _rollouts: advance(config.val_samples),
            )
        scores = validation_scores(self.problems, groups, k=config.val_samples)
        per_problem = scores.pop("per_problem")
        result = {
            "epoch": epoch,
            **scores,
            "library_version": library.version,
            "library_size": len(library),
            "cost_usd": self.client.accounting.total.cost_usd - before,
            "per_problem": per_problem,
        }
        self.run.log(f"validation after {label}: Mean@{config.val_samples} = {result['mean_at_k']}")
        return result

    async def validate_step(
        self, step: int, epoch: int, before: Library, applied: ApplyResult, state: RunState, counters: StepCounters
    ) -> tuple[Library, list[dict[str, Any]]]:
        """Validate the step's candidate library; with the gate, keep it only if validation did not drop beyond noise.

        Returns the library the step ends with and, when the gate rejected the candidate, the history
        records of the rejected operations.
        """
        candidate = await self.validate(epoch, applied.library, label=f"step {step}")
        record = {**candidate, "step": step}
        counters.val_mean_at_k = candidate["mean_at_k"]
        if self.config.gate:
            record.update(await self._gate(step, candidate, state, counters))
        state.step_validation[step] = record
        if record.get("gate") != "rejected":
            return applied.library, []
        before.next_id = max(before.next_id, applied.library.next_id)  # ids of rejected lessons are never reused
        reason = f"gate: {counters.gate['reason']}, Δ {counters.gate['diff']:+.3f} CI {counters.gate['ci95']}"
        return before, [
            {"kind": "rejected", "op": item.operation.to_wire(), "reason": reason} for item in applied.applied
        ]

    async def _gate(
        self, step: int, candidate: dict[str, Any], state: RunState, counters: StepCounters
    ) -> dict[str, Any]:
        """The paired test of the candidate against the last accepted library (the gate's record fields)."""
        ref_step = reference_step(state.step_validation, step)
        if ref_step is None:  # the starting library, validated once (free on a rerun: cached)
            ref_step = INITIAL
            start = self.run.load_step_library(INITIAL)
            state.step_validation[INITIAL] = {**await self.validate(0, start, label="start"), "step": INITIAL}
        decision = gate_decision(
            state.step_validation[ref_step]["per_problem"], candidate["per_problem"], seed=self.config.seed
        )
        counters.gate = {**decision, "reference_step": ref_step}
        self.run.log(f"gate after step {step}: {decision['decision']} ({decision['reason']})")
        return {"gate": decision["decision"], "gate_reference_step": ref_step}


def validation_scores(problems: list[Problem], groups: list[list[Rollout]], *, k: int) -> dict[str, Any]:
    """Mean@k, the failed samples, and each problem's share of correct samples (problems with none left out)."""
    pairs = [(sum(r.ok for r in g), sum(r.ok and is_correct(r.reward) for r in g)) for g in groups]
    scored = [(n, c) for n, c in pairs if n > 0]
    return {
        "mean_at_k": mean_at_k(scored) if scored else None,
        "k": k,
        "problems": len(problems),
        "failed_samples": sum(k - n for n, _ in pairs),
        # the gate's paired test and the Pareto view use each problem's share of correct samples
        "per_problem": {p.id: c / n for p, (n, c) in zip(problems, pairs, strict=False) if n > 0},
    }
