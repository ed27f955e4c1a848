"""Rollouts: the model answers a problem G times with the library injected, and each answer is scored.

Learning (`tfgrpo learn`) and evaluation (`tfgrpo eval`) both build their prompts with `PromptSpec` and
sample with `sample_group`, so the prompt a library was learned with is exactly the prompt it is
evaluated (and shipped) with. Learn's validation and `tfgrpo eval` both run `sample_problems`: every
problem of a set K times, scored against its answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tfgrpo.core.datasets import Problem
from tfgrpo.experiences.render import render_system_text
from tfgrpo.llm.client import LLMClient
from tfgrpo.llm.errors import PER_REQUEST_FAILURES, BudgetExceededError
from tfgrpo.llm.types import SamplingParams
from tfgrpo.prompts import render_prompt


@dataclass
class PromptSpec:
    """How a problem becomes messages. `experiences` is the rendered library (or "" for none).

    The system message is `experiences`' own system-prompt template (`system_template=None`), the very
    text `tfgrpo export --format system-prompt` ships: a library evaluated with `--library` and its
    exported system prompt evaluated with `--system-prompt` send identical messages. No experiences,
    no system message.
    """

    system_template: str | None = None
    user_template: str = "rollout_user"
    system_prompt: str | None = None  # a fixed system prompt file's text, used instead of the template

    def messages(self, problem: str, experiences: str) -> list[dict[str, str]]:
        if self.system_prompt is not None:
            system = self.system_prompt.strip()
        elif not experiences:
            system = ""
        elif self.system_template is None:
            system = system_prompt_for(experiences)
        else:
            system = render_prompt(self.system_template, experiences=experiences, rendered=experiences)
        user = render_prompt(self.user_template, problem=problem)
        return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]


T = TypeVar("T")


def system_prompt_for(rendered_experiences: str) -> str:
    return render_system_text(rendered_experiences)


@dataclass
class Rollout:
    query_id: str
    sample: int
    messages: list[dict[str, Any]]
    completion: str = ""
    #: the model's reasoning (None when it gave none): summarised in stage 1, never graded
    reasoning: str | None = None
    reward: float | None = None
    extracted: str | None = None
    reason: str = ""
    error: str | None = None
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0  # of completion_tokens
    cost_usd: float = 0.0
    cached: bool = False
    trajectory: dict[str, Any] | None = None
    num_tool_calls: int = 0
    #: experiences of the group's prompt that this rollout left out (learn's credit design; empty in eval)
    left_out: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_row(self) -> dict[str, Any]:
        row = {
            "query_id": self.query_id,
            "sample": self.sample,
            "messages": self.messages,
            "completion": self.completion,
            "reward": self.reward,
            "extracted": self.extracted,
            "reason": self.reason,
            "error": self.error,
            "prompt_tokens": self.prompt_tokens,
            "cached_prompt_tokens": self.cached_prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost_usd": round(self.cost_usd, 8),
            "cached": self.cached,
            "num_tool_calls": self.num_tool_calls,
        }
        if self.reasoning is not None:  # absent otherwise: rows of models without reasoning stay as they were
            row.update(reasoning=self.reasoning, reasoning_tokens=self.reasoning_tokens)
        if self.trajectory is not None:
            row["trajectory"] = self.trajectory
        if self.left_out:
            row["left_out"] = self.left_out
        row.update(self.extra)
        return row


async def sample_group(
    client: LLMClient,
    query_id: str,
    messages: list[dict[str, Any]],
    *,
    n: int,
    sampling: SamplingParams,
    tag: str = "rollout",
    agent: Any | None = None,
    sample_offset: int = 0,
    variants: dict[int, tuple[list[dict[str, Any]], list[str]]] | None = None,
) -> list[Rollout]:
    """G samples of one prompt, one call per sample, so one failed call loses one rollout, not the group.

    `variants`: sample index -> (its own messages, the experiences they leave out), for learn's credit design.

    A call that still fails after the client's retries becomes a rollout with `error` set (excluded
    from scoring by callers); a budget stop or a configuration error (bad key, unknown model) propagates. Sample indices run from `sample_offset`
    (cache keys include them: a later epoch draws fresh samples, a rerun the same ones).
    """

    async def one(index: int) -> Rollout:
        own, left_out = (variants or {}).get(index, (messages, []))
        rollout = Rollout(query_id=query_id, sample=index, messages=own, left_out=left_out)
        cache_index = sample_offset + index
        try:
            if agent is not None:
                trajectory = await agent(client, own, sampling=sampling, tag=tag, sample_index=cache_index)
                rollout.completion = trajectory.final_text
                rollout.trajectory = trajectory.to_jsonable()
                rollout.num_tool_calls = trajectory.num_tool_calls
                rollout.prompt_tokens = trajectory.prompt_tokens
                rollout.cached_prompt_tokens = trajectory.cached_prompt_tokens
                rollout.completion_tokens = trajectory.completion_tokens
                rollout.cost_usd = trajectory.cost_usd
                rollout.cached = trajectory.cached
                if trajectory.stop_reason == "error":
                    rollout.error = trajectory.error or "trajectory failed"
                return rollout
            (completion,) = await client.chat(own, n=1, sampling=sampling, tag=tag, sample_offset=cache_index)
        except PER_REQUEST_FAILURES as exc:
            rollout.error = f"{type(exc).__name__}: {exc}"
            return rollout
        rollout.completion = completion.text
        rollout.reasoning = completion.reasoning
        rollout.reasoning_tokens = completion.usage.reasoning_tokens
        rollout.prompt_tokens = completion.usage.prompt_tokens
        rollout.cached_prompt_tokens = completion.usage.cached_prompt_tokens
        rollout.completion_tokens = completion.usage.completion_tokens
        rollout.cost_usd = completion.cost_usd
        rollout.cached = completion.cached
        return rollout

    return list(await asyncio.gather(*(one(i) for i in range(n))))


def score_group(reward: Any, rollouts: list[Rollout], gold: str | None, columns: dict[str, Any] | None = None) -> None:
    """Fill reward/extracted/reason of the valid rollouts in place (failed calls stay unscored)."""
    valid = [r for r in rollouts if r.ok]
    if not valid:
        return
    extra = {k: [v] * len(valid) for k, v in (columns or {}).items()}
    if gold is not None:
        extra["answer"] = [gold] * len(valid)
    scores = reward.score([r.completion for r in valid], **extra)
    for rollout, score in zip(valid, scores, strict=False):
        rollout.reward = score.value
        rollout.extracted = score.extracted
        rollout.reason = score.reason


async def sample_problems(
    client: LLMClient,
    problems: list[Problem],
    *,
    prompt: PromptSpec,
    experiences_for: Callable[[str], str],
    reward: Any,
    n: int,
    sampling: SamplingParams,
    tag: str,
    agent: Any | None = None,
    on_problem_done: Callable[[Problem, list[Rollout]], None] | None = None,
) -> list[list[Rollout]]:
    """Every problem K (`n`) times at once, each sample scored against the problem's answer.

    The one "run these problems K times" loop of learn's validation and `tfgrpo eval`. Returns the
    rollouts per problem, in the order of `problems` (not completion order). `experiences_for(problem)`
    is the rendered library for that problem ("" for none); `on_problem_done` sees each problem's scored
    rollouts as soon as they are in (a progress bar, a partial file).
    """

    async def one(problem: Problem) -> list[Rollout]:
        messages = prompt.messages(problem.problem, experiences_for(problem.problem))
        rollouts = await sample_group(client, problem.id, messages, n=n, sampling=sampling, tag=tag, agent=agent)
        await asyncio.to_thread(score_group, reward, rollouts, problem.answer, {"problem": problem.problem})
        if on_problem_done is not None:
            on_problem_done(problem, rollouts)
        return rollouts

    return await gather_all(one(problem) for problem in problems)


async def gather_all(coroutines: Iterable[Awaitable[T]]) -> list[T]:
    """asyncio.gather that cancels the rest when one fails (a budget stop, a crash), leaving no orphans."""
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    try:
        return list(await asyncio.gather(*tasks))
    except GeneratorExit:  # the coroutine is being finalised (its loop is gone): nothing left to await
        raise
    except BudgetExceededError:
        # Calls already sent are paid for: let them finish so their answers land in the cache for --resume.
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
