"""Leakage guards: does an experience contain a problem's gold answer, or copy a problem's text?

A library that memorises answers or problems inflates every score measured on those problems. Two checks,
each against a set of reference problems (anything with `id`, `problem` and `answer`):

- answer: the experience contains a value equal to a problem's gold answer under the math reward's
  equivalence. Numbers (`42`, `-7`, `0.5`, `3/4`, `\\frac{84}{2}`, and plain sums like `62 + 10` as what
  they come to: `tfgrpo.experiences.values`) are compared as exact rationals in process; math spans (`$...$`, `\\(...\\)`, `\\frac{..}{..}`, `\\sqrt{..}`, `\\boxed{..}`) are compared with
  expression golds by math-verify in the reward's killable worker pool. Integers with absolute value below
  `min_integer` (default 10) are not evidence (every lesson says "check 2 cases") and are not compared;
  nor are one-character non-numeric golds (choice letters).
- copy: the experience shares word n-grams with a problem: shared / min(n-grams of either) >= `copy_threshold`,
  with n = min(`ngram`, words of either) and at least 3 words on both sides; or it repeats `copy_min_words`
  (10) consecutive words of the problem, as written or with its math removed (a LaTeX statement copied
  without its formulas).

A value equal to a gold is only *evidence* of a leak when it is tied to that problem (`LeakFinding.tied`, and
the words that tie it in `tie_evidence`), strongest first:
- "provenance": the experience was proposed by the group of that very problem alone (whose gold the model
  saw), so a number in it equal to that gold is that problem's answer;
- "id", "quote", "distinctive token": the text names the problem by what tells it from the others of the set,
  whatever the set's size (`tfgrpo.experiences.naming`): its id, a quote of its opening (or of a run that holds
  its distinctive token), a name only it has, a number only it has beside the same word ("key 5"), a number
  only it has that is not round ("2010", "79"), or the key of its template's family ("Compute f(15)"). A gold
  below `min_integer` is tied by an id or a quote, or by a name only it has when the text counts the gold
  with the problem's noun ("Tom ends up with 7 apples"), not by a token alone;
- "names the problem": it shares enough of the problem's distinctive words (words, names and numbers of the
  statement that at most `distinctive_share` of the reference problems use), weighted by rarity (sum of
  log(problems / problems using it) >= `min_naming_score`; 1.5 times that for a gold below `min_integer`).
  Plain words alone ("angle", "players") tie only a gold of `min_integer` or more, in a text that brings at
  most one number the problem does not have, unless they score twice `min_naming_score`;
- "specific value": the value is too specific to be a coincidence: an expression, or a fraction whose
  denominator exceeds 12.
An untied match ("a cube has 12 edges" while some problem's answer is 12) is a coincidence: reported
with `tied=None`, and never a reason to reject. A copy is always tied. What the guard cannot see: a leak
that paraphrases the problem in other words and states an unspecific answer, from a group it was not
proposed by (a lesson carried over from another run, say).

Pure: no LLM call. Used by `tfgrpo learn` after every step, `tfgrpo library check`, and `tfgrpo eval --library`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Literal, Protocol

from tfgrpo.core.answers import normalize_answer
from tfgrpo.experiences.findings import LeakFinding, LeakKind
from tfgrpo.experiences.model import Library
from tfgrpo.experiences.naming import RUN, Naming, ProblemIndex, ngrams, plain_words, terms, words
from tfgrpo.experiences.values import candidates, exact_value
from tfgrpo.rewards.math import equivalent_many, gold_answer
from tfgrpo.rewards.verifier import Verifier

LeakageMode = Literal["reject", "flag", "off"]

_MIN_COPY_WORDS = RUN
SPECIFIC_DENOMINATOR = 12
SMALL_GOLD_FACTOR = 1.5
#: Rarity is counted as if the references sat among this many other problems that do not use the word: with
#: five reference problems a word unique to one is still strong evidence, not log(5) = 1.6 nats.
BACKGROUND_PROBLEMS = 100


class ReferenceProblem(Protocol):
    id: str
    problem: str
    answer: str | None


@dataclass(frozen=True)
class _Ref:
    id: str
    source: str
    gold: str | None  # normalised
    value: Fraction | None  # exact value of a numeric gold
    distinctive: frozenset[str] = frozenset()  # words and numbers of the statement few problems share
    rarity: tuple[tuple[str, float], ...] = ()  # (distinctive term, log(problems / problems using it))
    small: bool = False  # an integer gold below min_integer: evidence only when the text names the problem
    statement: str = ""


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
        copy_min_words: a text that repeats this many consecutive words of a problem copies it, however long.
        min_naming_score: how rare the words a text shares with a problem must be, in sum (each counts
            log(problems / problems using it)), for the text to name that problem.
        quote_words: a text that repeats this many consecutive words of a problem, a run at most
            `distinctive_share` of the problems contain, quotes it.
    """

    sets: Mapping[str, Sequence[ReferenceProblem]]
    ngram: int = 6
    copy_threshold: float = 0.5
    min_integer: int = 10
    verifier: Verifier | None = None
    distinctive_share: float = 0.05
    min_naming_score: float = 9.0
    copy_min_words: int = 10
    quote_words: int = 6
    _refs: list[_Ref] = field(init=False, repr=False)
    _by_value: dict[Fraction, list[_Ref]] = field(init=False, repr=False)
    _by_key: dict[tuple[str, str], int] = field(init=False, repr=False)  # (source, problem id) -> reference index
    _index: ProblemIndex | None = field(init=False, repr=False)  # the problems' words, built on first use
    _statement_values: dict[int, set[Fraction]] = field(init=False, repr=False)  # the numbers of a statement

    def __post_init__(self) -> None:
        if not 0 < self.copy_threshold <= 1:
            raise ValueError(f"copy_threshold must be in (0, 1] (got {self.copy_threshold})")
        if self.ngram < _MIN_COPY_WORDS:
            raise ValueError(f"ngram must be at least {_MIN_COPY_WORDS} (got {self.ngram})")
        if min(self.copy_min_words, self.quote_words) < _MIN_COPY_WORDS:
            raise ValueError(f"copy_min_words and quote_words must be at least {_MIN_COPY_WORDS}")
        self._refs, self._by_value, self._by_key = [], {}, {}
        self._index, self._statement_values = None, {}
        for source, problems in self.sets.items():
            for problem in problems:
                self._refs.append(self._reference(source, problem))
        statement_terms = [set(terms(ref.statement)) for ref in self._refs]
        usage = Counter(word for words in statement_terms for word in words)
        most = max(1, int(self.distinctive_share * len(self._refs)))
        for index, ref in enumerate(self._refs):
            rare = frozenset(word for word in statement_terms[index] if usage[word] <= most)
            total = len(self._refs) + BACKGROUND_PROBLEMS
            rarity = tuple((word, math.log(total / usage[word])) for word in sorted(rare))
            self._refs[index] = ref = replace(ref, distinctive=rare, rarity=rarity)
            self._by_key[ref.source, ref.id] = index
            if ref.value is not None:
                self._by_value.setdefault(ref.value, []).append(ref)

    def _reference(self, source: str, problem: ReferenceProblem) -> _Ref:
        gold_text = gold_answer(problem.answer)
        gold = normalize_answer(gold_text) if gold_text else None
        value = exact_value(gold) if gold else None
        small = value is not None and value.denominator == 1 and abs(value) < self.min_integer
        if value is None and gold is not None and len(gold) < 2:
            gold = None  # a choice letter
        return _Ref(problem.id, source, gold, value, small=small, statement=problem.problem)

    @property
    def size(self) -> int:
        return len(self._refs)

    @property
    def index(self) -> ProblemIndex:
        """The problems' words for copies, quotes, ids and distinctive tokens; built on first use."""
        if self._index is None:
            self._index = ProblemIndex(
                [ref.id for ref in self._refs],
                [ref.statement for ref in self._refs],
                share=self.distinctive_share,
                quote_words=self.quote_words,
                excluded=[words(ref.gold or "") for ref in self._refs],
            )
        return self._index

    def check(
        self, items: Iterable[tuple[str | None, str]], sources: Sequence[Collection[str]] | None = None
    ) -> list[LeakFinding]:
        """Findings for (experience id or None, text) items, in input order; one per (text, problem, kind).

        `sources`, one per item: the ids of the problems whose groups proposed it (its provenance)."""
        items = list(items)
        findings = self._answers(items)
        for index, (experience_id, text) in enumerate(items):
            findings[index].extend(self._copies(experience_id, text))
        kept = []
        for index, group in enumerate(findings):
            origin = set(sources[index]) if sources is not None else set()
            text = items[index][1]
            words_of_text = set(terms(text))
            namings = self.index.namings(text) if any(f.kind == "answer" for f in group) else {}
            for finding in group:
                if finding.kind == "answer":
                    position = self._by_key[finding.source, finding.problem_id]
                    ref = self._refs[position]
                    tie = self._tie(position, origin, words_of_text, namings.get(position))
                    tie = tie or self._rare_words(position, words_of_text, text, namings.get(position))
                    if tie is None and ref.small:
                        tie = self._counted(position, namings.get(position), words(text))
                    if tie is None and _specific(ref):
                        tie = "specific value", f"gold {ref.gold}"
                    finding.tied, finding.tie_evidence = tie if tie else (None, None)
                    if ref.small and finding.tied is None:
                        continue  # "check 2 cases": a small number in a lesson is evidence of nothing
                kept.append(finding)
        return kept

    def _answers(self, items: list[tuple[str | None, str]]) -> list[list[LeakFinding]]:
        """Per item, its values equal to a gold: numbers in process, expression golds by math-verify, batched."""
        findings: list[list[LeakFinding]] = [[] for _ in items]
        pending: list[tuple[int, str, _Ref, str]] = []  # (index, span, ref, gold) for math-verify, batched
        expression_refs = [r for r in self._refs if r.gold is not None and r.value is None]
        for index, (experience_id, text) in enumerate(items):
            seen: set[tuple[str, str]] = set()
            numbers, spans = candidates(text)
            for number in numbers:
                value = exact_value(normalize_answer(number))
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
        if pending:
            verdicts = equivalent_many([(gold, span) for _, span, _, gold in pending], verifier=self.verifier)
            matched: set[tuple[int, str, str]] = set()
            for (index, span, ref, _), equal in zip(pending, verdicts, strict=True):
                if equal and (index, ref.source, ref.id) not in matched:
                    matched.add((index, ref.source, ref.id))
                    findings[index].append(self._answer(items[index][0], items[index][1], ref, span))
        return findings

    def check_library(self, library: Library) -> list[LeakFinding]:
        """The library's findings; an experience's provenance (the queries of the step that made it) is its source."""
        experiences = list(library)
        return self.check(((e.id, e.text) for e in experiences), [e.provenance.query_ids for e in experiences])

    def _ref(self, finding: LeakFinding) -> _Ref:
        return self._refs[self._by_key[finding.source, finding.problem_id]]

    def _tie(self, position: int, origin: set[str], words: set[str], naming: Naming | None) -> tuple[str, str] | None:
        """(kind, the words that carry it) of the strongest evidence that ties a gold in a text to its problem:
        its provenance, or a naming (an id, a quote; a distinctive token for a gold of min_integer or more)."""
        ref = self._refs[position]
        if origin == {ref.id}:
            return "provenance", f"proposed by the group of {ref.id} alone"
        if naming is not None and (naming.kind != "distinctive token" or not ref.small):
            return naming.kind, naming.words
        return None

    def _rare_words(self, position: int, words: set[str], text: str, naming: Naming | None) -> tuple[str, str] | None:
        """ "names the problem": the text shares enough of its rare terms (the rarer, the stronger; a small gold,
        a 4 in "4 squares", needs more). Words alone ("angle", "degrees", "players") are how lessons talk about
        a topic: they tie only a gold of min_integer or more, and only in a text that brings at most one number
        of its own ("9 players play 36 games" is a rule's example, not the tournament's answer). A symbol, a
        number or a name of the problem (`17_b`, `4y^2`, "Maureen") is the problem's own, and so are words rare
        enough to score twice `min_naming_score`."""
        ref = self._refs[position]
        shared = [(word, weight) for word, weight in ref.rarity if word in words and word != ref.gold]
        score = sum(weight for _, weight in shared)
        if score < self.min_naming_score * (SMALL_GOLD_FACTOR if ref.small else 1):
            return None
        own = (naming is not None and naming.name) or any(
            not word.isalpha() or word in self.index.names[position] for word, _ in shared
        )
        if not own and ref.small:
            return None
        if not own and score < 2 * self.min_naming_score and len(self._foreign_numbers(position, text)) > 1:
            return None
        return "names the problem", f"rare words {', '.join(word for word, _ in shared)} ({score:.1f})"

    def _foreign_numbers(self, position: int, text: str) -> set[Fraction]:
        """The numbers of a text, other than the gold, that the problem does not have."""
        ref = self._refs[position]
        if position not in self._statement_values:
            spelled = {Fraction(_NUMBER_WORDS[word]) for word in words(ref.statement) if word in _NUMBER_WORDS}
            self._statement_values[position] = _values(ref.statement) | spelled
        return _values(text) - self._statement_values[position] - {ref.value}

    def _counted(self, position: int, naming: Naming | None, text: tuple[str, ...]) -> tuple[str, str] | None:
        """A small gold tied by a name only the problem has, when the text counts with it what the problem counts
        ("Tom ends up with 7 apples" for "Tom has 3 apples and buys 4 more"): a name alone ties no small gold."""
        gold = self._refs[position].gold
        if naming is None or not naming.name:
            return None
        counted = self.index.counted[position]
        for word, after in zip(text, text[1:], strict=False):
            if word == gold and after in counted:
                return naming.kind, f"{naming.words}, and '{gold} {after}'"
        return None

    def _answer(self, experience_id: str | None, text: str, ref: _Ref, found: str) -> LeakFinding:
        found = found.strip()
        return LeakFinding(
            kind="answer",
            experience_id=experience_id,
            text=text,
            problem_id=ref.id,
            source=ref.source,
            evidence=f"{found} = gold answer {ref.gold}" + (" (equivalent expression)" if found != ref.gold else ""),
        )

    def _copied_run(self, sequence: tuple[str, ...], index: int, plain: bool) -> str | None:
        """A run of `copy_min_words` consecutive words of the problem (as written, or with its math removed)
        inside a longer text, if there is one."""
        n = self.copy_min_words
        if len(sequence) < n:
            return None
        shared = ngrams(sequence, n) & self.index.grams(index, n, plain=plain)
        return " ".join(min(shared)) if shared else None

    def _copies(self, experience_id: str | None, text: str) -> list[LeakFinding]:
        raw = words(text)
        if len(raw) < _MIN_COPY_WORDS:
            return []
        plain = plain_words(text)
        grams_by_n: dict[int, set[tuple[str, ...]]] = {}
        found = []
        for index in self.index.candidates(raw, plain):
            ref, problem_words = self._refs[index], self.index.sequences[index][0]
            n = min(self.ngram, len(raw), len(problem_words))
            if n < _MIN_COPY_WORDS:
                continue
            ours = grams_by_n.setdefault(n, ngrams(raw, n))
            shared = ours & self.index.grams(index, n)
            overlap = len(shared) / min(len(ours), len(self.index.grams(index, n)))
            run = None
            if overlap < self.copy_threshold:
                run = self._copied_run(raw, index, plain=False) or self._copied_run(plain, index, plain=True)
            if overlap >= self.copy_threshold or run is not None:
                example = " ".join(max(shared)) if run is None else run
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
                        tie_evidence=f"'{example}'",
                    )
                )
        return found


_NUMBER_WORDS = {
    word: value
    for value, word in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
        "seventeen eighteen nineteen twenty".split()
    )
}


def _values(text: str) -> set[Fraction]:
    return {value for number in candidates(text)[0] if (value := exact_value(normalize_answer(number))) is not None}


def _specific(ref: _Ref) -> bool:
    """A gold too specific to turn up in a general rule by chance: an expression (`\\frac{3\\sqrt2}{7}`) or a
    fraction with a denominator over 12. No integer is: 40320 (8!), 1440 (minutes in a day) and 2021 (a year)
    are some problem's answer and every lesson's fact alike (tests/data/leakage_lessons.jsonl)."""
    if ref.value is None:
        return ref.gold is not None and len(ref.gold) >= 3
    return ref.value.denominator > SPECIFIC_DENOMINATOR


__all__ = ["LeakFinding", "LeakKind", "LeakageChecker", "LeakageMode", "ReferenceProblem"]
