"""Exact match after normalisation: case, surrounding space and punctuation, math delimiters, `\\text{}`."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from tfgrpo.core.answers import normalize_answer, normalize_text
from tfgrpo.rewards.base import Reward, Score, column, completion_text
from tfgrpo.rewards.extraction import last_answer_line, last_boxed
from tfgrpo.rewards.params import flag

_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
_PUNCT_EDGES = re.compile(r"^[\s\"'`.,;:!?()\[\]]+|[\s\"'`.,;:!?()\[\]]+$")


def exact_match_form(answer: str) -> str:
    """The form two free-text answers share to match (SQuAD's): `normalize_answer`, then the one text
    normaliser (`normalize_text`), without articles and without punctuation at the edges."""
    text = _ARTICLES.sub(" ", normalize_text(normalize_answer(answer)))
    return _PUNCT_EDGES.sub("", " ".join(text.split()))


def final_text(completion: str) -> str:
    """The answer part of a free-text completion: last box, else last answer line, else the last non-empty line."""
    boxed = last_boxed(completion)
    if boxed is not None:
        return boxed
    line = last_answer_line(completion)
    if line is not None:
        return line
    lines = [line for line in completion.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


class ExactMatchReward(Reward):
    """1.0 when the normalised final answer equals the normalised reference (any of them, if a list)."""

    name = "exact"

    def __init__(self, answer_key: str = "answer", *, whole_completion: bool = False) -> None:
        super().__init__()
        self.answer_key = answer_key
        self.whole_completion = flag(self.name, "whole_completion", whole_completion)

    def score(self, completions: Sequence[Any], prompts: Sequence[Any] | None = None, **columns: Any) -> list[Score]:
        golds = column(columns, self.answer_key, len(completions), reward_name=self.name)
        scores = []
        for completion, gold in zip(completions, golds, strict=True):
            text = completion_text(completion)
            answer = text.strip() if self.whole_completion else final_text(text)
            references = [g for g in (gold if isinstance(gold, list) else [gold]) if g is not None and str(g).strip()]
            if not references:
                scores.append(Score(None, answer, f"no reference answer in column '{self.answer_key}'"))
            elif not answer.strip():
                scores.append(Score(0.0, None, "empty answer"))
            elif exact_match_form(answer) in {exact_match_form(str(ref)) for ref in references}:
                scores.append(Score(1.0, answer, "correct: exact match"))
            else:
                scores.append(Score(0.0, answer, f"wrong: {answer[:60]!r} does not match the reference"))
        return scores


__all__ = ["ExactMatchReward", "exact_match_form", "final_text"]
