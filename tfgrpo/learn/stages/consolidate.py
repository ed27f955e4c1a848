"""Stage 3: merge every operation proposed for a batch into one final list, and apply it.

Groups of one batch propose overlapping and sometimes conflicting changes (two groups adding the same
lesson in other words, one modifying what another deletes). One consolidation call sees all proposals,
the current library and the near-duplicates the vector store found, and returns the final operations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tfgrpo.experiences.model import Library
from tfgrpo.experiences.ops import AddOp, Operation
from tfgrpo.experiences.schemas import reply_format
from tfgrpo.learn.stages import OpsReply, render_stage_prompt, request_operations
from tfgrpo.learn.stages.advantage import GroupAnalysis
from tfgrpo.llm.client import LLMClient
from tfgrpo.llm.types import SamplingParams


@dataclass
class NearDuplicate:
    """A proposed text that is very close to an experience already in the library."""

    text: str
    id: str
    similarity: float


@dataclass
class Consolidation:
    proposed: list[Operation]
    reply: OpsReply | None  # None when nothing was proposed (no call made)
    near_duplicates: list[NearDuplicate] = field(default_factory=list)
    final: list[Operation] = field(default_factory=list)
    fell_back: bool = False  # the reply failed and `apply_proposed` sent the proposals through as they were

    def to_row(self) -> dict[str, Any]:
        return {
            "proposed": [op.to_wire() for op in self.proposed],
            "near_duplicates": [vars(d) for d in self.near_duplicates],
            "final": [op.to_wire() for op in self.final],
            "fell_back": self.fell_back,
            **(self.reply.to_row() if self.reply else {"operations": [], "attempts": [], "error": None}),
        }


def consolidation_messages(
    analyses: list[GroupAnalysis],
    *,
    library_text: str,
    near_duplicates: list[NearDuplicate],
    template: str,
    max_words: int,
    ids: list[str] | None = None,
) -> list[dict[str, str]]:
    proposals = [
        {"query_id": a.query_id, "operations": [op.describe() for op in a.reply.operations]}
        for a in analyses
        if a.reply.operations
    ]
    prompt = render_stage_prompt(
        template,
        experiences=library_text,
        proposals=proposals,
        near_duplicates=near_duplicates,
        max_words=max_words,
        reply_format=reply_format(max_ops=final_ops_limit(analyses), ids=ids or []),
    )
    return [{"role": "user", "content": prompt}]


def novel_lessons(proposed: list[Operation], library: Library, near_duplicates: list[NearDuplicate]) -> list[str]:
    """Proposed new lessons the library does not have: not its exact text, and (with dedup on) not a near
    duplicate the vector store found."""
    similar = {d.text for d in near_duplicates}
    return [
        op.experience
        for op in proposed
        if isinstance(op, AddOp) and op.experience not in similar and library.find_text(op.experience) is None
    ]


def final_ops_limit(analyses: list[GroupAnalysis]) -> int:
    """The final list is never longer than what the groups proposed (it merges and drops, it does not invent)."""
    return max(1, sum(len(a.reply.operations) for a in analyses))


async def consolidate(
    client: LLMClient,
    analyses: list[GroupAnalysis],
    *,
    library: Library,
    library_text: str,
    near_duplicates: list[NearDuplicate],
    template: str,
    sampling: SamplingParams,
    max_words: int,
    on_failure: str = "skip",
) -> Consolidation:
    """One call for the whole batch; no call at all when no group proposed anything."""
    proposed = [op for a in analyses for op in a.reply.operations]
    if not proposed:
        return Consolidation(proposed=[], reply=None)
    messages = consolidation_messages(
        analyses,
        library_text=library_text,
        near_duplicates=near_duplicates,
        template=template,
        max_words=max_words,
        ids=library.ids,
    )
    reply = await request_operations(
        client,
        messages,
        library=library,
        sampling=sampling,
        tag="consolidate",
        max_words=max_words,
        max_ops=final_ops_limit(analyses),
        # The template's rule: an empty list only if the library already has every proposed lesson.
        # Constrained backends are held to it (a 135M model otherwise dropped every proposal).
        min_ops=1 if novel_lessons(proposed, library, near_duplicates) else 0,
    )
    result = Consolidation(proposed=proposed, reply=reply, near_duplicates=near_duplicates)
    failed = reply.error is not None or (reply.malformed and not reply.operations)
    if failed and on_failure == "apply_proposed":
        result.final, result.fell_back = list(proposed), True
    else:
        result.final = list(reply.operations)
    return result


__all__ = [
    "Consolidation",
    "NearDuplicate",
    "consolidate",
    "consolidation_messages",
    "final_ops_limit",
    "novel_lessons",
]
