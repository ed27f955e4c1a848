"""The two things GEPA calls, built on tfgrpo: its adapter (rollouts + reward) and its reflection model.

GEPA is synchronous and runs in a worker thread; tfgrpo's client is asynchronous and lives on the event
loop of the caller. `LoopBridge` hands each call from the thread to that loop, so every request GEPA makes
goes through the one `LLMClient` (response cache, retries, concurrency, tokens, cost, budget) exactly as
learn's and eval's do. The adapter samples a candidate with the very prompt `tfgrpo eval --system-prompt`
sends (`PromptSpec` with the candidate as system prompt, the eval's user template) and scores it with the
eval's reward; its feedback for the reflection is the reward's reason, and the gold answer where allowed.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tfgrpo.core.datasets import Problem
from tfgrpo.llm.client import LLMClient
from tfgrpo.llm.types import SamplingParams
from tfgrpo.prompts import render_prompt
from tfgrpo.rollout.sampling import PromptSpec, Rollout, sample_problems

T = TypeVar("T")
#: accounting tags of GEPA's calls: the task model's answers (metric calls) and the reflections
TASK_TAG, REFLECTION_TAG = "gepa_task", "gepa_reflection"


class RunStopped(RuntimeError):
    """The caller stopped (Ctrl-C, a cancelled task): GEPA's thread makes no further call."""


@dataclass
class LoopBridge:
    """Run a coroutine on `loop` from another thread and wait for its result (or its exception).

    `stop()` (from the loop's side) makes every later call raise `RunStopped`, and `stopped` is GEPA's stop
    condition, so the worker thread ends at its next call instead of running on after a Ctrl-C."""

    loop: asyncio.AbstractEventLoop
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if self._stop.is_set():
            coroutine.close()
            raise RunStopped("stopped by the caller")
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def stop(self) -> None:
        self._stop.set()

    def stopped(self, _state: Any = None) -> bool:
        return self._stop.is_set()


@dataclass
class CallCounts:
    """How often GEPA called: its metric calls (one scored sample each) and its reflections. Tokens and
    dollars are the client's ledger's (`LLMClient.accounting`), which counts only calls actually sent."""

    task_samples: int = 0
    reflections: int = 0


@dataclass
class ClientLM:
    """GEPA's `LanguageModel` (`prompt -> text`) over an `LLMClient`: its reflection model."""

    bridge: LoopBridge
    client: LLMClient
    sampling: SamplingParams
    usage: CallCounts = field(default_factory=CallCounts)

    def __call__(self, prompt: str | list[dict[str, Any]]) -> str:
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        (completion,) = self.bridge.run(self.client.chat(messages, sampling=self.sampling, tag=REFLECTION_TAG))
        self.usage.reflections += 1
        return completion.text


@dataclass
class RewardAdapter:
    """GEPA's adapter: a candidate's system prompt on a batch of problems, one sample each, scored by `reward`."""

    bridge: LoopBridge
    client: LLMClient
    reward: Any
    sampling: SamplingParams
    component: str
    user_template: str = "rollout_user"
    feedback_gold: bool = True
    usage: CallCounts = field(default_factory=CallCounts)
    #: GEPA's own reflective proposer writes the new texts (None tells it so)
    propose_new_texts: Any = None

    def evaluate(self, batch: list[Problem], candidate: dict[str, str], capture_traces: bool = False) -> Any:
        from gepa import EvaluationBatch

        prompt = PromptSpec(user_template=self.user_template, system_prompt=candidate[self.component])
        groups = self.bridge.run(
            sample_problems(
                self.client,
                batch,
                prompt=prompt,
                experiences_for=lambda _problem: "",
                reward=self.reward,
                n=1,
                sampling=self.sampling,
                tag=TASK_TAG,
            )
        )
        rollouts = [group[0] for group in groups]
        self.usage.task_samples += len(rollouts)
        traces = [self._trace(problem, rollout) for problem, rollout in zip(batch, rollouts, strict=True)]
        return EvaluationBatch(
            outputs=[rollout.completion for rollout in rollouts],
            scores=[float(rollout.reward or 0.0) for rollout in rollouts],
            trajectories=traces if capture_traces else None,
        )

    def _trace(self, problem: Problem, rollout: Rollout) -> dict[str, Any]:
        gold = problem.answer if self.feedback_gold else None
        feedback = render_prompt(
            "gepa_feedback",
            error=rollout.error,
            correct=bool(rollout.reward and rollout.reward >= 1.0),
            reward=rollout.reward,
            reason=rollout.reason or "no reason given",
            gold=gold,
        )
        return {"problem": problem.problem, "completion": rollout.completion, "feedback": feedback}

    def make_reflective_dataset(
        self, candidate: dict[str, str], eval_batch: Any, components_to_update: list[str]
    ) -> Mapping[str, Sequence[Mapping[str, Any]]]:
        """GEPA's reflection reads, per example, what went in, what came out and what the reward said."""
        records = [
            {"Inputs": trace["problem"], "Generated Outputs": trace["completion"], "Feedback": trace["feedback"]}
            for trace in eval_batch.trajectories or []
        ]
        return {component: records for component in components_to_update}


__all__ = ["REFLECTION_TAG", "TASK_TAG", "CallCounts", "ClientLM", "LoopBridge", "RewardAdapter", "RunStopped"]
