"""What the leakage guard reports: one experience that leaks one problem, and the evidence that ties it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

LeakKind = Literal["answer", "copy"]


class LeakFinding(BaseModel):
    """One experience that leaks one problem."""

    kind: LeakKind = Field(description="answer: contains the gold answer; copy: copies the problem text.")
    experience_id: str | None = Field(None, description="Id of the experience (None for a proposed operation).")
    text: str = Field(description="The experience text.")
    problem_id: str
    source: str = Field(description="Name of the problem set the problem comes from (train, val, aime24, ...).")
    evidence: str = Field(description="What matched: the value and the gold answer, or the copied words.")
    overlap: float | None = Field(None, description="copy: fraction of shared n-grams.")
    tied: str | None = Field(
        None,
        description="What ties the match to the problem: provenance, id, quote, distinctive token, names the "
        "problem, specific value, copy; None: a coincidence (a general rule's number that equals some problem's "
        "answer).",
    )
    tie_evidence: str | None = Field(
        None, description="The words that tie it: the id, the quoted words, the token and its neighbour, ..."
    )

    @property
    def is_leak(self) -> bool:
        """Evidence enough to reject: a copy, or an answer tied to its problem."""
        return self.tied is not None

    @property
    def tie_label(self) -> str:
        """`tied` with the words that carry it ("quote: 'determine the smallest prime such'")."""
        if self.tied is None:
            return "coincidence (not a leak)"
        return f"{self.tied}: {self.tie_evidence}" if self.tie_evidence else self.tied

    def describe(self) -> str:
        who = f"[{self.experience_id}] " if self.experience_id else ""
        what = "contains the answer of" if self.kind == "answer" else "copies"
        tag = f" [{self.tie_label if self.tied else 'coincidence'}]" if self.kind == "answer" else ""
        return f"{who}{what} {self.source}:{self.problem_id} ({self.evidence}){tag}: {_short(self.text)}"


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


__all__ = ["LeakFinding", "LeakKind"]
