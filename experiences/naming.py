"""Does a text name one problem of a set? The evidence that tells that problem from the others.

A text names a problem when it carries what distinguishes that problem from the rest of the set, whatever the
set's size:

- "id": the problem's id (`SIM-5`, `aime2024-II-05`, `dapo17k-0040`), read as its run of words; an id with no
  letter or no digit, or one the loader made up (`row-0007`), says nothing;
- "distinctive token": a name of the problem that at most `most` problems use ("Beth"), or such a number next
  to the same word as in the problem ("key 5", where only one problem has a 5): what a template varies, a
  name, a year. Single digits count, because in a templated set they are what tells the problems apart; common
  words do not, however few problems use them ("a circle", "the maximum": every lesson says those);
- "quote": a run of `quote_words` consecutive words of the problem that at most `most` problems contain and
  that is the problem's opening or holds one of its distinctive tokens ("the secret number of key 5" in a set
  where every problem asks for a secret number); a phrase from the middle of a statement ("the sum of the
  reciprocals of") is how lessons talk, not a quote.

Words are compared twice: as written and with the math removed (`$...$`, `\\(...\\)`, `\\[...\\]` spans and
LaTeX commands), so a lesson that quotes a LaTeX statement without its formulas still quotes it.

Every pass reads each word of a text a bounded number of times (dictionary look-ups of its runs): linear in the
text, whatever it holds (tests/experiences/test_scanners_adversarial.py).
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

# The leakage guard's math spans: a `\(` (`\[`) span ends at its close and holds no second opening, so n unclosed
# openings are not each read to the end of the text (quadratic).
INLINE_MATH = re.compile(r"\$\$?([^$]+?)\$\$?|\\\(((?:(?!\\\().)+?)\\\)|\\\[((?:(?!\\\[).)+?)\\\]", re.S)
_LATEX_NAME = re.compile(r"\\[A-Za-z]+")
_WORD = re.compile(r"\w+")
_GENERATED_ID = re.compile(r"row-\d+")
_CAPITALISED = re.compile(r"[A-Z][a-z]+")
_DIGIT = re.compile(r"\d")
_SENTENCE_END = ".!?:"
#: Shortest run of words the copy checks look for: the index of runs is keyed by it.
RUN = 3
# `4c^2`, `n^{4}`: a formula's terms name a problem too. A base starts where a word does (`(?<!\w)`) and is
# read whole (`\w++`): the same matches as `(\w+)\^`, which from every letter of a long word read on to its
# end and back (40,000 letters: 11 s); this reads each letter a bounded number of times.
_POWER = re.compile(r"(?<!\w)(\w++)\^\{?(\w++)\}?")
_BRACED_SUBSCRIPT = re.compile(r"_\{(\w++)\}")  # `17_{b}` is written `17_b` in plain text
_STOPWORDS = frozenset(
    "that with what find which there their then than from each have this such these those when where only into "
    "also some many more most other same both them they what whose will would could should must does make".split()
)


def words(text: str) -> tuple[str, ...]:
    """Lower-cased words, math and all."""
    return tuple(_WORD.findall(text.lower()))


def plain_words(text: str) -> tuple[str, ...]:
    """Lower-cased words with the math removed: what is left of a statement quoted without its formulas."""
    return words(_LATEX_NAME.sub(" ", INLINE_MATH.sub(" ", text)))


def terms(text: str) -> Iterable[str]:
    """The tokens whose rarity can name a problem: words of 4+ letters, names like `log_x` or `omega_1`, numbers
    of 2+ digits (`17`, `2015`), powers (`4c^2`); LaTeX commands (`\\left`, `\\frac`) are markup, not words."""
    plain = _LATEX_NAME.sub(" ", text).lower()
    found = (
        t
        for t in _WORD.findall(_BRACED_SUBSCRIPT.sub(r"_\1", plain))
        if (len(t) >= 4 and t.isalpha() and t not in _STOPWORDS)
        or (len(t) >= 2 and t.isdigit())
        or (len(t) >= 3 and "_" in t)
    )
    powers = (m.group(1) + "^" + m.group(2) for m in _POWER.finditer(plain.replace(" ", "")))
    return itertools.chain(found, powers)


def ngrams(sequence: Sequence[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(sequence[i : i + n]) for i in range(len(sequence) - n + 1)}


@dataclass(frozen=True)
class Naming:
    """What ties a text to one problem: the kind of evidence and the words that carry it."""

    kind: str  # "id", "quote" or "distinctive token"
    words: str
    name: bool = False  # a distinctive token that is a name ("Tom"): a small gold beside its counted noun is tied


@dataclass
class ProblemIndex:
    """The problems' words, indexed once for the evidence that a text names one of them.

    Args:
        ids: the problems' ids, in order.
        statements: the problems' texts, in the same order.
        share: a token (a run of words) is distinctive when at most this share of the problems use it
            (and at least one problem: in a set of 20, the one problem that has it).
        quote_words: the words a quote needs.
        excluded: per problem, tokens that are never its distinctive token (its gold answer).
    """

    ids: Sequence[str]
    statements: Sequence[str]
    share: float = 0.05
    quote_words: int = 6
    excluded: Sequence[Iterable[str]] = ()
    sequences: list[tuple[tuple[str, ...], tuple[str, ...]]] = field(init=False)  # (words, plain words)
    most: int = field(init=False)
    _runs: dict[tuple[str, ...], list[int]] = field(init=False, repr=False)
    _ids: dict[str, list[tuple[tuple[str, ...], int]]] = field(init=False, repr=False)  # first word -> (id, index)
    _marks: dict[tuple[str, ...], list[int]] = field(init=False, repr=False)  # distinctive numbered pair -> problems
    _names: dict[str, list[int]] = field(init=False, repr=False)  # distinctive name -> problems
    _numbers: dict[str, list[tuple[int, str]]] = field(init=False, repr=False)  # distinctive number -> (problem, why)
    counted: list[frozenset[str]] = field(init=False, repr=False)  # per problem: the words its numbers count
    names: list[frozenset[str]] = field(init=False, repr=False)  # per problem: its distinctive names
    _grams: dict[tuple[int, int], set[tuple[str, ...]]] = field(init=False, repr=False)
    _rare: list[frozenset[str]] = field(init=False, repr=False)  # per problem: its distinctive tokens
    _openings: list[set[tuple[str, ...]]] = field(init=False, repr=False)  # per problem: its first quote_words

    def __post_init__(self) -> None:
        self.sequences = [(words(s), plain_words(s)) for s in self.statements]
        self.most = max(1, int(self.share * len(self.sequences)))
        self._grams, self._runs, self._ids, self._marks, self._names, self._numbers = {}, {}, {}, {}, {}, {}
        excluded = [set(e) for e in self.excluded] or [set() for _ in self.sequences]
        vocabularies = [set(raw) | set(plain) for raw, plain in self.sequences]
        pairs = [
            {pair for seq in sequence for pair in ngrams(seq, 2) if _numbered(pair, excluded[index])}
            for index, sequence in enumerate(self.sequences)
        ]
        usage = Counter(token for vocabulary in vocabularies for token in vocabulary)
        pair_usage = Counter(pair for problem_pairs in pairs for pair in problem_pairs)
        lower = {word for statement in self.statements for word in _WORD.findall(statement) if word.islower()}
        self._rare, self._openings, self.names = [], [], []
        self.counted = [
            frozenset(b for a, b in ngrams(raw, 2) if a.isdigit() and b.isalpha() and len(b) >= 3)
            for raw, _ in self.sequences
        ]
        self._index_numbers(usage, excluded)
        own_numbers: list[set[str]] = [set() for _ in self.sequences]
        for token, found in self._numbers.items():
            for index, _ in found:
                own_numbers[index].add(token)
        for index, (raw, plain) in enumerate(self.sequences):
            for gram in ngrams(raw, RUN) | ngrams(plain, RUN):
                self._runs.setdefault(gram, []).append(index)
            names = {t for t in _names(self.statements[index], lower) if usage[t] <= self.most} - excluded[index]
            marks = {pair for pair in pairs[index] if pair_usage[pair] <= self.most}
            self.names.append(frozenset(names))
            for name in names:
                self._names.setdefault(name, []).append(index)
            for pair in marks:
                self._marks.setdefault(pair, []).append(index)
            marked = {token for pair in marks for token in pair if _is_number(token)}
            self._rare.append(frozenset(names | marked | own_numbers[index]))
            self._openings.append({raw[: self.quote_words], plain[: self.quote_words]})
            id_words = words(self.ids[index])
            if _usable_id(self.ids[index]):
                self._ids.setdefault(id_words[0], []).append((id_words, index))

    def _index_numbers(self, usage: Counter[str], excluded: list[set[str]]) -> None:
        """Numbers that tell a problem from the others: one that is not round and that few problems use, three
        digits or more without its zeros ("2010", "1575"; not "100"), or two that no other problem uses ("79");
        and the key of a template's family (problems equal but for one number: "Compute f(15)" among f(15),
        f(16), ...) that no sibling has. A family that varies two numbers ("What is 4 times 4?") is arithmetic
        drill, and its numbers are every lesson's."""
        for index, (raw, _) in enumerate(self.sequences):
            for token in set(raw) - excluded[index]:
                digits = len(token.strip("0"))  # "100" and "0.05" are round: every lesson's numbers
                if token.isdigit() and (
                    (digits >= 3 and usage[token] <= self.most) or (digits == 2 and usage[token] == 1)
                ):
                    self._numbers.setdefault(token, []).append((index, f"the number '{token}'"))
        families: dict[str, list[int]] = {}
        for index, (raw, _) in enumerate(self.sequences):
            families.setdefault(" ".join("#" if w.isdigit() else w for w in raw), []).append(index)
        for members in families.values():
            slots = list(zip(*([w for w in self.sequences[i][0] if w.isdigit()] for i in members), strict=True))
            varying = [slot for slot in slots if len(set(slot)) > 1]
            if len(members) < 2 or len(varying) != 1:
                continue
            keys = Counter(varying[0])
            for index, key in zip(members, varying[0], strict=True):
                if keys[key] == 1 and key not in excluded[index]:
                    why = f"'{key}', the key only it has of the {len(members)} problems of its template"
                    self._numbers.setdefault(key, []).append((index, why))

    def candidates(self, *sequences: tuple[str, ...]) -> list[int]:
        """The problems that share a run of `RUN` words with any of `sequences`: no other can be copied or quoted
        (10,000 training problems: a text is compared with the few it shares a phrase with, not with all)."""
        found: set[int] = set()
        for sequence in sequences:
            for gram in ngrams(sequence, RUN):
                found.update(self._runs.get(gram, ()))
        return sorted(found)

    def grams(self, index: int, n: int, plain: bool = False) -> set[tuple[str, ...]]:
        """Problem `index`'s n-grams (of its plain words with `plain`), cached."""
        key = (index, -n if plain else n)
        if key not in self._grams:
            self._grams[key] = ngrams(self.sequences[index][plain], n)
        return self._grams[key]

    def namings(self, text: str) -> dict[int, Naming]:
        """Problem index -> the strongest evidence that `text` names it (id, then quote, then token)."""
        raw, plain = words(text), plain_words(text)
        found: dict[int, Naming] = {}
        for index, naming in [
            *self._token_namings(raw, plain),
            *self._quote_namings(raw, plain),
            *self._id_namings(raw),
        ]:
            found[index] = naming  # later evidence is stronger
        return found

    def _id_namings(self, raw: tuple[str, ...]) -> Iterable[tuple[int, Naming]]:
        for position, word in enumerate(raw):
            for id_words, index in self._ids.get(word, ()):
                if raw[position : position + len(id_words)] == id_words:
                    yield index, Naming("id", self.ids[index])

    def _quote_namings(self, raw: tuple[str, ...], plain: tuple[str, ...]) -> Iterable[tuple[int, Naming]]:
        n = self.quote_words
        ours = ngrams(raw, n) | ngrams(plain, n)
        shared = {
            index: (ours & self.grams(index, n)) | (ours & self.grams(index, n, plain=True))
            for index in self.candidates(raw, plain)
        }
        usage = Counter(gram for grams in shared.values() for gram in grams)
        for index, grams in shared.items():
            rare = sorted(
                gram
                for gram in grams
                if usage[gram] <= self.most
                and (gram in self._openings[index] or any(token in self._rare[index] for token in gram))
            )
            if rare:
                yield index, Naming("quote", " ".join(rare[0]))

    def _token_namings(self, raw: tuple[str, ...], plain: tuple[str, ...]) -> Iterable[tuple[int, Naming]]:
        for token in sorted(set(raw) | set(plain), reverse=True):
            for index, why in self._numbers.get(token, ()):
                yield index, Naming("distinctive token", why)
        for pair in sorted(ngrams(raw, 2) | ngrams(plain, 2), reverse=True):
            for index in self._marks.get(pair, ()):
                yield index, Naming("distinctive token", f"'{' '.join(pair)}'")
        for name in sorted(set(raw), reverse=True):
            for index in self._names.get(name, ()):
                yield index, Naming("distinctive token", f"the name '{name}'", name=True)


#: Words too plain to make a number a problem's own ("the 9", "are 36", "with 12").
_PLAIN = frozenset(
    "a an and are as at be by each every for from has have how if in is it its of on or than that the then there "
    "this to was were what when which who with".split()
)


def _numbered(pair: tuple[str, ...], excluded: set[str]) -> bool:
    """A pair of words that can mark a problem: a number (not the gold) beside a word of three or more letters
    ("key 5"); a variable ("y 3") or another number ("2 3") is how every formula and list goes on."""
    first, second = pair
    first_number, second_number = _is_number(first), _is_number(second)
    if first_number == second_number:
        return False
    number, word = (first, second) if first_number else (second, first)
    return number not in excluded and word.isalpha() and len(word) >= 3 and word not in _PLAIN


def _is_number(word: str) -> bool:
    """A number or a name with a digit (`5`, `2018`, `x1`, `sim5`): what a template varies, an id's part."""
    return _DIGIT.search(word) is not None


def _names(statement: str, lower: set[str]) -> set[str]:
    """Lower-cased names of a statement: words capitalised inside a sentence ("... and Beth lives"), and those
    capitalised at a sentence's start that the set never writes in lower case ("Alicia bikes", not "Cities")."""
    found = set()
    for match in _CAPITALISED.finditer(statement):
        start = match.start()
        if start and (statement[start - 1].isalnum() or statement[start - 1] == "\\"):
            continue  # inside a word ("xYz"), or a LaTeX command ("\\Delta")
        before = start - 1
        while before >= 0 and statement[before].isspace():
            before -= 1  # each run of spaces is read once per word after it: linear
        word = match.group().lower()
        if (before >= 0 and statement[before] not in _SENTENCE_END) or word not in lower:
            found.add(word)
    return found


def _usable_id(problem_id: str) -> bool:
    return (
        len(problem_id) >= 3
        and any(c.isalpha() for c in problem_id)
        and any(c.isdigit() for c in problem_id)
        and not _GENERATED_ID.fullmatch(problem_id)
    )


__all__ = ["INLINE_MATH", "RUN", "Naming", "ProblemIndex", "ngrams", "plain_words", "terms", "words"]
