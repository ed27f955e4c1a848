"""Stage 1: summarise one rollout step by step, given its grade (and the gold answer when there is one).

The summary names the experiences the attempt relied on and where it went wrong; stage 2 compares
these summaries instead of raw trajectories, which keeps its prompt short and its signal focused.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tfgrpo.core.answers import is_correct
from tfgrpo.experiences.apply import approximate_tokens
from tfgrpo.learn.stages import gather_all, render_stage_prompt
from tfgrpo.llm.client import LLMClient
from tfgrpo.llm.errors import PER_REQUEST_FAILURES
from tfgrpo.llm.types import SamplingParams
from tfgrpo.rollout.sampling import Rollout
from tfgrpo.rollout.trajectory import Trajectory  # the agent's own rendering, shared with eval


@dataclass
class SummaryRequest:
    rollout: Rollout
    problem: str
    experiences: str  # the library text that was in this rollout's prompt
    gold: str | None
    gold_is_pseudo: bool = False


@dataclass
class Summary:
    rollout: Rollout
    text: str | None
    error: str | None = None
    truncated: bool = False

    def to_row(self) -> dict[str, Any]:
        return {
            "query_id": self.rollout.query_id,
            "sample": self.rollout.sample,
            "reward": self.rollout.reward,
            "summary": self.text,
            "truncated": self.truncated,
            "error": self.error,
        }


def outcome_of(reward: float | None) -> str:
    if reward is None:
        return "unscored"
    return "correct" if is_correct(reward) else "wrong"


def summary_messages(
    request: SummaryRequest, *, template: str, token_budget: int
) -> tuple[list[dict[str, str]], bool]:
    """The stage-1 prompt of one rollout, and whether its trajectory had to be cut."""
    trajectory, truncated = fitted_trajectory(request.rollout, token_budget)
    prompt = render_stage_prompt(
        template,
        problem=request.problem,
        experiences=request.experiences,
        trajectory=trajectory,
        outcome=outcome_of(request.rollout.reward),
        reward=request.rollout.reward,
        gold=request.gold,
        gold_is_pseudo=request.gold_is_pseudo,
        reason=request.rollout.reason,
        tools=request.rollout.trajectory is not None,
    )
    return [{"role": "user", "content": prompt}], truncated


async def summarize_rollouts(
    client: LLMClient,
    requests: list[SummaryRequest],
    *,
    template: str,
    sampling: SamplingParams,
    token_budget: int,
    on_done: Callable[[int], None] | None = None,
) -> list[Summary]:
    """Summaries of all `requests` at once. Identical prompts (two rollouts that wrote the same answer,
    common on easy problems) are sent once: concurrent identical requests would all miss the cache."""
    prompts = [summary_messages(r, template=template, token_budget=token_budget) for r in requests]
    unique: dict[str, list[int]] = {}
    for index, (messages, _) in enumerate(prompts):
        unique.setdefault(json.dumps(messages, sort_keys=True), []).append(index)

    async def one(indices: list[int]) -> tuple[str | None, str | None]:
        try:
            (completion,) = await client.chat(prompts[indices[0]][0], sampling=sampling, tag="summary")
            return completion.text.strip(), None
        except PER_REQUEST_FAILURES as exc:
            return None, f"{type(exc).__name__}: {exc}"
        finally:
            if on_done is not None:
                on_done(len(indices))

    replies = await gather_all(one(indices) for indices in unique.values())
    summaries: list[Summary | None] = [None] * len(requests)
    for indices, (text, error) in zip(unique.values(), replies, strict=False):
        for index in indices:
            summaries[index] = Summary(requests[index].rollout, text, error=error, truncated=prompts[index][1])
    return summaries  # type: ignore[return-value]


def fitted_trajectory(rollout: Rollout, token_budget: int) -> tuple[str, bool]:
    """The attempt's text within `token_budget` (approx. tokens), and whether any of it had to be cut."""
    text, reasoning_cut = _attempt_text(rollout, max_chars=token_budget * 4)
    fitted, cut = truncate_middle(text, token_budget)
    return fitted, cut or reasoning_cut


def trajectory_text(rollout: Rollout, max_chars: int = 8000) -> str:
    """The attempt as text: the completion (after its reasoning, cut in the middle so the answer fits), or
    every turn, tool call and tool result of an agent trajectory."""
    return _attempt_text(rollout, max_chars=max_chars)[0]


def _attempt_text(rollout: Rollout, max_chars: int) -> tuple[str, bool]:
    if rollout.trajectory is None:
        if not rollout.reasoning:
            return rollout.completion, False
        reasoning_chars = max(max_chars - len(rollout.completion) - 40, max_chars // 4)
        reasoning, cut = truncate_middle(rollout.reasoning.strip(), reasoning_chars // 4)
        return f"[reasoning]\n{reasoning}\n\n[answer]\n{rollout.completion}", cut
    return Trajectory.from_jsonable(rollout.trajectory).render_for_summary(max_chars=max_chars), False


def truncate_middle(text: str, token_budget: int) -> tuple[str, bool]:
    """Cut the middle out of a text over `token_budget` (approx. tokens): the plan and the ending matter most."""
    if approximate_tokens(text) <= token_budget:
        return text, False
    # the marker is part of what is sent: its room comes out of the kept text, so the result fits the budget
    marker_room = len(f"\n[... {len(text)} characters omitted ...]\n")
    keep_chars = max(token_budget * 4 - marker_room, 0)
    head = keep_chars // 3
    tail = keep_chars - head
    omitted = len(text) - head - tail
    return f"{text[:head]}\n[... {omitted} characters omitted ...]\n{text[len(text) - tail :]}", True


__all__ = [
    "Summary",
    "SummaryRequest",
    "fitted_trajectory",
    "outcome_of",
    "summarize_rollouts",
    "summary_messages",
    "trajectory_text",
    "truncate_middle",
]
