"""Stage 2: the group's semantic advantage, as operations on the library.

GRPO's numerical advantage says which rollouts of a group were better than the group mean; here the
model reads the summaries of the better and the worse rollouts next to the current library and writes
down, as add / modify / delete operations, the lesson that explains the difference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tfgrpo.experiences.model import Library
from tfgrpo.experiences.ops import Rejection
from tfgrpo.experiences.schemas import reply_format
from tfgrpo.learn.stages import OpsReply, render_stage_prompt, request_operations
from tfgrpo.learn.stages.summarize import Summary, outcome_of
from tfgrpo.llm.client import LLMClient
from tfgrpo.llm.types import SamplingParams


@dataclass
class GroupRequest:
    query_id: str
    problem: str
    gold: str | None
    gold_is_pseudo: bool
    summaries: list[Summary]


@dataclass
class GroupAnalysis:
    query_id: str
    reply: OpsReply

    def to_row(self) -> dict[str, Any]:
        return {"query_id": self.query_id, **self.reply.to_row()}


def group_messages(
    request: GroupRequest,
    *,
    library_text: str,
    template: str,
    max_ops: int,
    max_words: int,
    ids: list[str] | None = None,
) -> list[dict[str, str]]:
    # Best attempts first, so the model reads what worked before what failed.
    ordered = sorted(request.summaries, key=lambda s: (-(s.rollout.reward or 0.0), s.rollout.sample))
    attempts = [
        {
            "index": s.rollout.sample,
            "reward": s.rollout.reward,
            "outcome": outcome_of(s.rollout.reward),
            "summary": s.text,
            "left_out": " ".join(s.rollout.left_out),  # the credit design's leave-outs: what it ran without
        }
        for s in ordered
    ]
    prompt = render_stage_prompt(
        template,
        problem=request.problem,
        gold=request.gold,
        gold_is_pseudo=request.gold_is_pseudo,
        experiences=library_text,
        attempts=attempts,
        max_ops=max_ops,
        max_words=max_words,
        reply_format=reply_format(max_ops=max_ops, ids=ids or []),
    )
    return [{"role": "user", "content": prompt}]


async def analyze_group(
    client: LLMClient,
    request: GroupRequest,
    *,
    library: Library,
    library_text: str,
    template: str,
    sampling: SamplingParams,
    max_ops: int,
    max_words: int,
) -> GroupAnalysis:
    messages = group_messages(
        request, library_text=library_text, template=template, max_ops=max_ops, max_words=max_words, ids=library.ids
    )
    reply = await request_operations(
        client,
        messages,
        library=library,
        sampling=sampling,
        tag="group",
        max_words=max_words,
        max_ops=max_ops,
        # The template's rule: an empty list only if the library already has the lesson, which an empty
        # library cannot. Constrained backends are held to it (a 135M model replied "operations": []).
        min_ops=0 if library.experiences else 1,
    )
    if len(reply.operations) > max_ops:  # K is a hard cap: the first K proposals count
        extra = reply.operations[max_ops:]
        reply.operations = reply.operations[:max_ops]
        reply.rejected += [
            Rejection(reason=f"over the limit of {max_ops} operations per group", item=op.to_wire()) for op in extra
        ]
    return GroupAnalysis(query_id=request.query_id, reply=reply)


__all__ = ["GroupAnalysis", "GroupRequest", "analyze_group", "group_messages"]
