"""The math reward: extract the final answer, then decide equivalence with the reference.

Plain numbers are decided in-process by exact rational arithmetic (`tfgrpo.rewards.normalize`); everything
else goes to math-verify in a killable worker process (`tfgrpo.rewards.verifier`) under a hard deadline, so a
hostile answer costs at most about `timeout_s` and never blocks a thread or an event loop.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from tfgrpo.core.answers import normalize_answer
from tfgrpo.rewards.base import Reward, Score, column, completion_text
from tfgrpo.rewards.extraction import Source, all_boxes, extract_answer, extract_with_source, is_bare_answer
from tfgrpo.rewards.normalize import fast_equivalent
from tfgrpo.rewards.params import number, optional_count
from tfgrpo.rewards.verifier import Verdict, Verifier, shared_verifier

_SHOWN = 60  # characters of an answer quoted in a reason
# math-verify drops primes (`E'` parses as `E`), so a prime that one side has and the other lacks decides alone.
_PRIMES = re.compile(r"'+|\\prime")
# ... and subscripts (`1200_7` parses as 1200), so a number's base that the answer states must be the reference's.
_BASE = re.compile(r"(?<=\d)_\{?(\d+)\}?")
WORKED_SOLUTION_CHARS = 80  # a longer reference with prose is a worked solution, not an answer
MAX_VERIFIED_CHARS = 10_000  # longer answers that are not plain numbers score 0 without a worker


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def gold_answer(gold: Any) -> str | None:
    """The reference as a string. A reference with boxes is reduced to them, every distinct box kept
    (`\\boxed{1} and \\boxed{-2}` is the answer `1, -2`); a worked solution without one is read like a
    completion (its answer line, else the formula it ends on); a short answer is kept as it is."""
    if gold is None:
        return None
    text = str(gold).strip()
    if "\\boxed" in text or "\\fbox" in text:
        text = all_boxes(text) or text
    elif len(text) > WORKED_SOLUTION_CHARS and not is_bare_answer(text):
        text = extract_answer(text) or text
    return text or None


def is_equivalent(gold: Any, pred: str | None, *, verifier: Verifier | None = None, timeout_s: float = 1.0) -> bool:
    """True when `pred` is mathematically the same answer as `gold` (gold first: the check is asymmetric).

    An unparsable answer, an unusable gold, or a comparison that exceeds the deadline counts as not equal.
    """
    gold_text = gold_answer(gold)
    if gold_text is None or pred is None:
        return False
    return _compare([(gold_text, pred)], verifier or shared_verifier(timeout_s=timeout_s))[0].equal is True


def equivalent_many(
    pairs: Sequence[tuple[str, str]], *, verifier: Verifier | None = None, timeout_s: float = 1.0
) -> list[bool]:
    """`is_equivalent` for many (gold, pred) pairs at once: plain numbers in process, the rest in parallel workers."""
    usable = [(gold_answer(gold), pred) for gold, pred in pairs]
    todo = [(index, (gold, pred)) for index, (gold, pred) in enumerate(usable) if gold is not None and pred]
    verdicts = _compare([pair for _, pair in todo], verifier or shared_verifier(timeout_s=timeout_s)) if todo else []
    equal = [False] * len(pairs)
    for (index, _), verdict in zip(todo, verdicts, strict=True):
        equal[index] = verdict.equal is True
    return equal


def _compare(pairs: Sequence[tuple[str, str]], verifier: Verifier) -> list[Verdict]:
    verdicts: list[Verdict | None] = []
    slow: list[tuple[int, tuple[str, str]]] = []
    for index, (gold, pred) in enumerate(pairs):
        gold_n, pred_n = normalize_answer(gold), normalize_answer(pred)
        decided = fast_equivalent(gold_n, pred_n)
        guarded = _refused_before_verifying(gold_n, pred_n) if decided is None else None
        if decided is not None:
            verdicts.append(Verdict(decided, "equivalent" if decided else "not equivalent"))
        elif guarded is not None:
            verdicts.append(guarded)
        else:
            verdicts.append(None)
            slow.append((index, (gold_n, pred_n)))
    if slow:
        for (index, _), verdict in zip(slow, verifier.check_many([pair for _, pair in slow]), strict=True):
            verdicts[index] = verdict
    return verdicts  # type: ignore[return-value]


def _refused_before_verifying(gold: str, pred: str) -> Verdict | None:
    """What math-verify would get wrong or waste its budget on: primes and number bases it drops, and
    answers too long to be a final answer (sympy would only burn the whole budget on them)."""
    if _PRIMES.findall(gold) != _PRIMES.findall(pred):
        return Verdict(False, "not equivalent (primes differ)")
    bases = sorted(_BASE.findall(pred))
    if bases and bases != sorted(_BASE.findall(gold)):
        return Verdict(False, "not equivalent (number bases differ)")
    if len(pred) > MAX_VERIFIED_CHARS:
        return Verdict(False, f"answer too long to verify ({len(pred)} characters)")
    return None


class MathReward(Reward):
    """1.0 when the completion's final answer equals the reference, 0.0 otherwise, None when unscorable.

    Args:
        answer_key: dataset column holding the reference answer.
        timeout_s: deadline per math-verify comparison (a timeout scores 0.0: hostile answers earn nothing).
        workers: verifier processes (default: one per core).
        verifier: an explicit `Verifier` to use instead of the process-wide shared one.
    """

    name = "math"

    def __init__(
        self,
        answer_key: str = "answer",
        *,
        timeout_s: float = 1.0,
        workers: int | None = None,
        verifier: Verifier | None = None,
    ) -> None:
        super().__init__()
        self.answer_key = answer_key
        self.timeout_s = number(self.name, "timeout_s", timeout_s)
        self.workers = optional_count(self.name, "workers", workers)
        self._verifier = verifier

    @property
    def verifier(self) -> Verifier:
        return self._verifier or shared_verifier(self.workers, self.timeout_s)

    def score(self, completions: Sequence[Any], prompts: Sequence[Any] | None = None, **columns: Any) -> list[Score]:
        golds = column(columns, self.answer_key, len(completions), reward_name=self.name)
        scores: list[Score | None] = [None] * len(completions)
        to_compare: list[tuple[int, str, str, Source]] = []
        for index, (completion, gold) in enumerate(zip(completions, golds, strict=True)):
            extracted, source = extract_with_source(completion_text(completion))
            gold_text = gold_answer(gold)
            if extracted is None:
                scores[index] = Score(0.0, None, "no final answer found (no \\boxed{}, answer line or number)")
            elif gold_text is None:
                scores[index] = Score(None, extracted, f"no reference answer in column '{self.answer_key}'")
            else:
                to_compare.append((index, gold_text, extracted, source))
        verdicts = _compare([(gold, pred) for _, gold, pred, _ in to_compare], self.verifier)
        for (index, gold, pred, source), verdict in zip(to_compare, verdicts, strict=True):
            scores[index] = _score(verdict, gold, pred, source)
        return scores  # type: ignore[return-value]


_WHERE = {"boxed": "boxed", "answer_line": "stated", "whole": "whole", "last_expression": "last"}


def _score(verdict: Verdict, gold: str, pred: str, source: str) -> Score:
    where = _WHERE.get(source, source)
    if verdict.timed_out:
        return Score(0.0, pred, f"wrong: checking the {where} answer {_short(pred)} {verdict.reason}")
    if verdict.equal is None:
        return Score(None, pred, f"unscorable: {verdict.reason} ({_short(gold)})")
    if verdict.equal:
        return Score(1.0, pred, f"correct: {where} answer {_short(pred)} equals the reference")
    detail = "" if verdict.reason == "not equivalent" else f" ({verdict.reason})"
    return Score(0.0, pred, f"wrong: {where} answer {_short(pred)} is not the reference {_short(gold)}{detail}")


__all__ = ["MathReward", "equivalent_many", "extract_answer", "gold_answer", "is_equivalent"]
