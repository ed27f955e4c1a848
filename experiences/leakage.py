"""Leakage guards: does an experience contain a problem's gold answer, or copy a problem's text?

A library that memorises answers or problems inflates every score measured on those problems. Two checks,
each against a set of reference problems (anything with `id`, `problem` and `answer`):

- answer: the experience contains a value equal to a problem's gold answer under the math reward's
  equivalence. Numbers (`42`, `-7`, `0.5`, `3/4`, `\\frac{84}{2}`) are compared as exact rationals in
  process; math spans (`$...$`, `\\(...\\)`, `\\frac{..}{..}`, `\\sqrt{..}`, `\\boxed{..}`) are compared with
  expression golds by math-verify in the reward's killable worker pool. Integers with absolute value below
  `min_integer` (default 10) are not evidence (every lesson says "check 2 cases") and are not compared;
  nor are one-character non-numeric golds (choice letters).
- copy: the experience shares word n-grams with a problem: shared / min(n-grams of either) >= `copy_threshold`,
  with n = min(`ngram`, words of either) and at least 3 words on both sides.

A value equal to a gold is only *evidence* of a leak when it is tied to that problem (`LeakFinding.tied`):
- "provenance": the experience was proposed by the group of that very problem alone (whose gold the model
  saw), so a number in it equal to that gold is that problem's answer;
- "names the problem": it shares `min_shared_words` of the problem's distinctive words (words and numbers
  of the statement that at most `distinctive_share` of the reference problems use);
- "specific value": the value is too specific to be a coincidence: an expression, a fraction whose
  denominator exceeds 12, or an integer of 1,000 or more that is not a multiple of 100 or a power of two.
An untied match ("a cube has 12 edges" while some problem's answer is 12) is a coincidence: reported
with `tied=None`, and never a reason to reject. A copy is always tied. What the guard cannot see: a leak
that paraphrases the problem in other words and states an unspecific answer, from a group it was not
proposed by (a lesson carried over from another run, say).

Pure: no LLM call. Used by `tfgrpo learn` after every step, `tfgrpo library check`, and `tfgrpo eval --library`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Literal, Protocol

from pydantic import BaseModel, Field

from experiences.model import Library
from rewards.math import equivalent_many, gold_answer
from rewards.verifier import Verifier
from tfgrpo.core.answers import as_fraction, normalize_answer

LeakKind = Literal["answer", "copy"]
LeakageMode = Literal["reject", "flag", "off"]

_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+)?(?![\w])")
_LATEX_COMMAND = re.compile(r"\\(?:[dt]?frac|sqrt|binom|boxed)\s*(?:\[[^\]]*\])?(?:\s*\{(?:[^{}]|\{[^{}]*\})*\})+")
_INLINE_MATH = re.compile(r"\$\$?([^$]+?)\$\$?|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)
_WORD = re.compile(r"\w+")
_MIN_COPY_WORDS = 3
SPECIFIC_INTEGER = 1000
SPECIFIC_DENOMINATOR = 12


class ReferenceProblem(Protocol):
    id: str
    problem: str
    answer: str | None


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
        description="What ties the match to the problem: provenance, names the problem, specific value, copy; "
        "None: a coincidence (a general rule's number that equals some problem's answer).",
    )

    @property
    def is_leak(self) -> bool:
        """Evidence enough to reject: a copy, or an answer tied to its problem."""
        return self.tied is not None

    def describe(self) -> str:
        who = f"[{self.experience_id}] " if self.experience_id else ""
        what = "contains the answer of" if self.kind == "answer" else "copies"
        tag = f" [{self.tied or 'coincidence'}]" if self.kind == "answer" else ""
        return f"{who}{what} {self.source}:{self.problem_id} ({self.evidence}){tag}: {_short(self.text)}"


@dataclass(frozen=True)
class _Ref:
    id: str
    source: str
    words: tuple[str, ...]
    gold: str | None  # normalised
    value: Fraction | None  # exact value of a numeric gold
    distinctive: frozenset[str] = frozenset()  # words and numbers of the statement few problems share


@dataclass
class LeakageChecker:
    """Indexes reference problems once; `check` then screens any number of texts.

    Args:
        sets: problem-set name -> problems (each with `id`, `problem`, `answer`).
        ngram: n of the word n-grams compared for copies.
        copy_threshold: fraction of shared n-grams from which a text counts as a copy (0 < t <= 1).
        min_integer: integer golds with smaller absolute value are not compared (too common to be evidence).
        verifier: math-verify pool for expression golds (default: the reward's shared pool, started on demand).
        distinctive_share: a statement's word is distinctive when at most this share of the problems use it.
        min_shared_words: distinctive words of a problem a text must share to name that problem.
    """

    sets: Mapping[str, Sequence[ReferenceProblem]]
    ngram: int = 6
    copy_threshold: float = 0.5
    min_integer: int = 10
    verifier: Verifier | None = None
    distinctive_share: float = 0.02
    min_shared_words: int = 2
    _refs: list[_Ref] = field(init=False, repr=False)
    _by_value: dict[Fraction, list[_Ref]] = field(init=False, repr=False)
    _grams: dict[tuple[int, int], set[tuple[str, ...]]] = field(init=False, repr=False)  # (ref index, n) -> n-grams

    def __post_init__(self) -> None:
        if not 0 < self.copy_threshold <= 1:
            raise ValueError(f"copy_threshold must be in (0, 1] (got {self.copy_threshold})")
        if self.ngram < _MIN_COPY_WORDS:
            raise ValueError(f"ngram must be at least {_MIN_COPY_WORDS} (got {self.ngram})")
        self._refs, self._by_value, self._grams = [], {}, {}
        for source, problems in self.sets.items():
            for problem in problems:
                self._refs.append(self._reference(source, problem))
        usage = Counter(word for ref in self._refs for word in set(_terms(ref.words)))
        most = max(1, int(self.distinctive_share * len(self._refs)))
        for index, ref in enumerate(self._refs):
            rare = frozenset(word for word in _terms(ref.words) if usage[word] <= most)
            self._refs[index] = ref = replace(ref, distinctive=rare)
            if ref.value is not None:
                self._by_value.setdefault(ref.value, []).append(ref)

    def _reference(self, source: str, problem: ReferenceProblem) -> _Ref:
        gold_text = gold_answer(problem.answer)
        gold = normalize_answer(gold_text) if gold_text else None
        value = _exact_value(gold) if gold else None
        if value is not None and value.denominator == 1 and abs(value) < self.min_integer:
            gold, value = None, None  # "2" in a lesson is no evidence of anything
        elif value is None and gold is not None and len(gold) < 2:
            gold = None  # a choice letter
        return _Ref(problem.id, source, tuple(_WORD.findall(problem.problem.lower())), gold, value)

    @property
    def size(self) -> int:
        return len(self._refs)

    def check(
        self, items: Iterable[tuple[str | None, str]], sources: Sequence[Collection[str]] | None = None
    ) -> list[LeakFinding]:
        """Findings for (experience id or None, text) items, in input order; one per (text, problem, kind).

        `sources`, one per item: the ids of the problems whose groups proposed it (its provenance)."""
        items = list(items)
        findings: list[list[LeakFinding]] = [[] for _ in items]
        pending: list[tuple[int, str, _Ref, str]] = []  # (index, span, ref, gold) for math-verify, batched
        expression_refs = [r for r in self._refs if r.gold is not None and r.value is None]
        for index, (experience_id, text) in enumerate(items):
            seen: set[tuple[str, str]] = set()
            numbers, spans = _candidates(text)
            for number in numbers:
                value = _exact_value(normalize_answer(number))
                for ref in self._by_value.get(value, []) if value is not None else []:
                    if (ref.source, ref.id) not in seen:
                        seen.add((ref.source, ref.id))
                        findings[index].append(self._answer(experience_id, text, ref, number))
            compact = "".join(text.split())
            for ref in expression_refs:
                gold = ref.gold
                assert gold is not None  # expression_refs keeps only references with a gold answer
                if (ref.source, ref.id) in seen:
                    continue
                if len(gold) >= 3 and "".join(gold.split()) in compact:
                    seen.add((ref.source, ref.id))
                    findings[index].append(self._answer(experience_id, text, ref, gold))
                else:
                    pending.extend((index, span, ref, gold) for span in spans)
            findings[index].extend(self._copies(experience_id, text))
        if pending:
            verdicts = equivalent_many([(gold, span) for _, span, _, gold in pending], verifier=self.verifier)
            matched: set[tuple[int, str, str]] = set()
            for (index, span, ref, _), equal in zip(pending, verdicts, strict=True):
                if equal and (index, ref.source, ref.id) not in matched:
                    matched.add((index, ref.source, ref.id))
                    findings[index].append(self._answer(items[index][0], items[index][1], ref, span))
        for index, group in enumerate(findings):
            origin = set(sources[index]) if sources is not None else set()
            words = set(_terms(_WORD.findall(items[index][1].lower())))
            for finding in group:
                if finding.kind == "answer":
                    finding.tied = self._tie(finding, origin, words)
        return [finding for group in findings for finding in group]

    def check_library(self, library: Library) -> list[LeakFinding]:
        """The library's findings; an experience's provenance (the queries of the step that made it) is its source."""
        experiences = list(library)
        return self.check(((e.id, e.text) for e in experiences), [e.provenance.query_ids for e in experiences])

    def _tie(self, finding: LeakFinding, origin: set[str], words: set[str]) -> str | None:
        ref = next(r for r in self._refs if r.id == finding.problem_id and r.source == finding.source)
        if origin == {ref.id}:
            return "provenance"
        if len(words & ref.distinctive) >= self.min_shared_words:
            return "names the problem"
        if _specific(ref):
            return "specific value"
        return None

    def _answer(self, experience_id: str | None, text: str, ref: _Ref, found: str) -> LeakFinding:
        return LeakFinding(
            kind="answer",
            experience_id=experience_id,
            text=text,
            problem_id=ref.id,
            source=ref.source,
            evidence=f"{found.strip()} = gold answer {ref.gold}",
        )

    def _copies(self, experience_id: str | None, text: str) -> list[LeakFinding]:
        words = tuple(_WORD.findall(text.lower()))
        if len(words) < _MIN_COPY_WORDS:
            return []
        grams_by_n: dict[int, set[tuple[str, ...]]] = {}
        found = []
        for index, ref in enumerate(self._refs):
            n = min(self.ngram, len(words), len(ref.words))
            if n < _MIN_COPY_WORDS:
                continue
            ours = grams_by_n.setdefault(n, _ngrams(words, n))
            theirs = self._grams.get((index, n))
            if theirs is None:
                theirs = self._grams[index, n] = _ngrams(ref.words, n)
            shared = ours & theirs
            overlap = len(shared) / min(len(ours), len(theirs))
            if overlap >= self.copy_threshold:
                example = " ".join(max(shared))
                found.append(
                    LeakFinding(
                        kind="copy",
                        experience_id=experience_id,
                        text=text,
                        problem_id=ref.id,
                        source=ref.source,
                        evidence=f"{overlap:.0%} of {n}-grams shared, e.g. '{example}'",
                        overlap=round(overlap, 3),
                        tied="copy",
                    )
                )
        return found


def _terms(words: Iterable[str]) -> Iterable[str]:
    """The words that can name a problem: 4+ letters, or numbers of 2+ digits (`17`, `2024`)."""
    return (w for w in words if (len(w) >= 4 and w.isalpha()) or (len(w) >= 2 and w.isdigit()))


def _specific(ref: _Ref) -> bool:
    """A gold too specific to turn up in a general rule by chance (see the module doc)."""
    if ref.value is None:
        return ref.gold is not None and len(ref.gold) >= 3
    if ref.value.denominator != 1:
        return ref.value.denominator > SPECIFIC_DENOMINATOR
    value = abs(ref.value.numerator)
    return value >= SPECIFIC_INTEGER and value % 100 != 0 and value & (value - 1) != 0


def _exact_value(normalized: str) -> Fraction | None:
    parsed = as_fraction(normalized.replace(" ", ""))
    return parsed[0] if parsed is not None else None


def _candidates(text: str) -> tuple[list[str], list[str]]:
    """(plain numbers, math spans) found in a text; a span that is a plain number also counts as a number."""
    spans = [next(g for g in m.groups() if g is not None) for m in _INLINE_MATH.finditer(text)]
    spans += [m.group() for m in _LATEX_COMMAND.finditer(text)]
    numbers = [m.group().replace(",", "") for m in _NUMBER.finditer(text)]
    expressions = []
    for span in spans:
        normalized = normalize_answer(span)
        if _exact_value(normalized) is not None:
            numbers.append(normalized)
        elif normalized:
            expressions.append(normalized)
    return numbers, expressions


def _ngrams(words: Sequence[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


__all__ = ["LeakFinding", "LeakKind", "LeakageChecker", "LeakageMode", "ReferenceProblem"]
