"""Numeric answers within an explicit tolerance: |pred - gold| <= abs_tol + rel_tol * |gold|."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tfgrpo.core.answers import as_fraction, normalize_answer
from tfgrpo.rewards.base import Reward, Score, column, completion_text
from tfgrpo.rewards.extraction import extract_answer
from tfgrpo.rewards.params import number


def parse_number(text: str | None) -> float | None:
    """A float from `42`, `-3.5`, `1,000`, `3/4`, `\\frac{3}{4}`, `2.5e-3`, `$12`, `45%` (= 45); else None."""
    if text is None:
        return None
    normal = normalize_answer(text)
    exact = as_fraction(normal)
    if exact is not None:
        return float(exact[0])
    try:
        value = float(normal.replace("\\times10^", "e").replace("{", "").replace("}", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


class NumericReward(Reward):
    """1.0 when the extracted number is within tolerance of the reference.

    Args:
        abs_tol: absolute tolerance (default 0: exact).
        rel_tol: relative tolerance as a fraction of |gold| (default 0). Set it deliberately: rel_tol=0.01
            makes 99 equal 100.
    """

    name = "numeric"

    def __init__(self, answer_key: str = "answer", *, abs_tol: float = 0.0, rel_tol: float = 0.0) -> None:
        super().__init__()
        self.answer_key = answer_key
        self.abs_tol = number(self.name, "abs_tol", abs_tol, inclusive=True)
        self.rel_tol = number(self.name, "rel_tol", rel_tol, inclusive=True)

    def score(self, completions: Sequence[Any], prompts: Sequence[Any] | None = None, **columns: Any) -> list[Score]:
        golds = column(columns, self.answer_key, len(completions), reward_name=self.name)
        scores = []
        for completion, gold in zip(completions, golds, strict=True):
            extracted = extract_answer(completion_text(completion))
            expected = parse_number(None if gold is None else str(gold))
            value = parse_number(extracted)
            if expected is None:
                scores.append(Score(None, extracted, f"reference {gold!r} is not a number"))
            elif value is None:
                scores.append(Score(0.0, extracted, "no number in the answer"))
            elif self._close(value, expected, extracted, str(gold)):
                scores.append(Score(1.0, extracted, f"correct: {value:g} is within tolerance of {expected:g}"))
            else:
                scores.append(Score(0.0, extracted, f"wrong: {value:g} is not within tolerance of {expected:g}"))
        return scores

    def _close(self, value: float, expected: float, extracted: str | None, gold: str) -> bool:
        if self.abs_tol == 0 and self.rel_tol == 0:
            # Zero tolerance compares exact rationals where both sides are exact (no float rounding surprises).
            left, right = as_fraction(normalize_answer(extracted or "")), as_fraction(normalize_answer(gold))
            if left is not None and right is not None:
                return left[0] == right[0]
            return value == expected
        return abs(value - expected) <= self.abs_tol + self.rel_tol * abs(expected)


__all__ = ["NumericReward", "parse_number"]
