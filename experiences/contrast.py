"""Do two lessons say different things? The word-level differences that sentence embeddings barely see.

MiniLM puts "multiply the key by 37, add 11 ..." and the same with "subtract 11" at cosine 0.99, with "73"
at 0.89, "Law of Sines" and "Law of Cosines" at 0.87, a lesson and its negation at 0.97. So before two
lessons are folded into one (`tfgrpo.experiences.dedup.is_near_duplicate`), `meaning_difference` looks for what
makes them different lessons whatever the embedding says:

- always: different numbers in digits, different operator symbols (+ - * / ^ = < > and their Unicode
  forms), a negation on one side only, the same words in another order ("degrees to radians" / "radians to
  degrees");
- when the two are one sentence with words changed here and there (word-sequence ratio >= SAME_TEMPLATE; in
  other words, "add up to" may well be "sum to", and the embedding judges): different number words ("twice",
  "half"), a negation said once more, a different one-letter symbol (C(5, 2) / P(5, 2)), two words of one
  contrast class (add / subtract, floor / ceiling, sine / cosine, include / exclude, small / large, ...), a
  qualifier of such a class on one side only ("even perfect numbers" / "perfect numbers"), or a term one side
  lacks: an acronym, a code identifier, or a word rarer than the language's commonest words by a
  word-frequency list (`wordfreq`): a dropped condition ("distinct") or a term swapped for another
  ("incenter" / "circumcenter"). Instruction synonyms ("check" / "verify", "make sure" / "ensure") count as
  one word; other synonyms swapped in ("align" / "line up") are lost with the terms: two lessons kept where
  one would do cost a prompt line, and credit tells them apart; a wrong rule folded into a right one costs
  the right one.

A difference found is a reason never to fold; none found leaves the decision to the embedding.
"""

from __future__ import annotations

import functools
import re
from collections import Counter

from tfgrpo.experiences.lexical import lexical_similarity, words

#: Word-sequence ratio from which two texts are one sentence with a few words changed (a template).
SAME_TEMPLATE = 0.6
#: Zipf frequency (log10 per billion words) below which a word carries content ("the" 7.7, "check" 5.3,
#: "answer" 5.1, "positive" 4.9, "distinct" 4.4, "numerator" 2.3).
CONTENT_ZIPF = 5.2
#: ... below which a word swapped for another is a specific term, not a synonym ("apply" 4.6, "ensure" 4.6,
#: "confirm" 4.3; "diameter" 3.9, "quadratic" 3.0, "incenter" 1.5).
SPECIFIC_ZIPF = 4.3

_NEGATIONS = frozenset("not no never don't dont cannot can't isn't aren't doesn't without avoid neither nor".split())
_NUMBER_WORDS = {
    **{w: str(n) for n, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve".split())},
    **{"twenty": "20", "thirty": "30", "hundred": "100", "thousand": "1000", "million": "1e6"},
    **{"half": "1/2", "halves": "1/2", "quarter": "1/4", "twice": "x2", "double": "x2", "thrice": "x3"},
    **{"triple": "x3", "once": "x1", "single": "1", "both": "2", "pair": "2", "dozen": "12"},
}
_TOKEN = re.compile(r"[\w']+")
_POSSESSIVE = re.compile(r"'s$")
_ACRONYM = re.compile(r"[A-Z]{2,}s?")  # UN, EU, AM-GM: names, whatever their frequency as words
_NAME_MARK = "#"
#: a one-letter word but the articles and "I": a variable or a function symbol
_SYMBOL = re.compile(r"(?<![\w'])(?![aAI](?![\w']))[A-Za-z](?![\w'])")
_NUMBER = re.compile(r"\d+(?:[.,/]\d+)*")
_HYPHENATED = re.compile(r"(?<=[A-Za-z])-(?=[A-Za-z])")  # "right-angled" is a word, not a minus
_OPERATORS = re.compile(r"[-+*/^=<>≤≥≠×÷±√∑∏−–·]")
#: Words that name one of several alternatives: a lesson that says one where the other says another is a
#: different lesson. Each line is a class; words are matched after a light stemming (`_stem`).
_CONTRAST_CLASSES = """
add subtract plus minus sum difference addition subtraction
multiply divide times product quotient multiplication division ratio
floor ceiling round truncate
min max minimum maximum minimize maximize smallest largest least most
sine cosine tangent sin cos tan cotangent secant cosecant sines cosines
numerator denominator
increase decrease increasing decreasing ascending descending rise fall grow shrink
include exclude inclusive exclusive including excluding inclusion exclusion
above below over under
larger smaller greater less bigger higher lower fewer more
large small big little high low long short wide narrow fast slow heavy light
largest smallest greatest least biggest highest lowest fewest most longest shortest
first second third fourth fifth last
before after
first last
earlier later
start end
beginning end
left right
upper lower top bottom
inside outside inner outer interior exterior
clockwise counterclockwise anticlockwise
horizontal vertical
row column rows columns
odd even
positive negative nonnegative nonpositive
prime composite
rational irrational
integer real complex natural whole fractional
open closed
union intersection
necessary sufficient
square cube squared cubed root
mean median mode average
permutation combination permutations combinations arrangement selection
gcd lcm
radius diameter circumference
area perimeter volume surface
variance deviation
independent dependent exclusive
convex concave
acute obtuse right
parallel perpendicular
sum product
row column
x y z
degrees radians
numerator denominator
all some none
every some
each some
always sometimes usually rarely
true false
""".strip().splitlines()


#: Contrast words whose addition alone changes little ("Always check ..." / "Check ..."): one side's extra
#: qualifier is a difference only for the others ("even perfect numbers" / "perfect numbers").
_LOOSE = "always sometimes usually rarely every each all some first last more most over before after start end".split()
#: Instruction words said in other words: a lesson that says "verify" where the other says "check" says the
#: same thing. Only words of how to proceed, never of mathematics (a term swapped for a related term is the
#: contrast above, or a term one side lacks).
_SYNONYM_CLASSES = """
check verify confirm validate test
substitute plug put
use apply employ
ensure
keep maintain retain
find compute calculate determine obtain
answer result
original given starting initial
problem question
begin start
reach arrive
split break
handle treat
required necessary needed
according based
entire whole
""".strip().splitlines()
_PHRASES = {("make", "sure"): "ensure", ("work", "out"): "compute", ("double", "check"): "check"}


@functools.cache
def _loose_stems() -> frozenset[str]:
    return frozenset(_stem(w) for w in _LOOSE)


@functools.cache
def _synonym_of() -> dict[str, str]:
    return {_stem(word): line.split()[0] for line in _SYNONYM_CLASSES for word in line.split()}


def _canonical(text_words: list[str]) -> list[str]:
    """The words with instruction phrases and synonyms in one form each ("make sure" -> "ensure")."""
    joined: list[str] = []
    for word in text_words:
        if joined and (joined[-1], word) in _PHRASES:
            joined[-1] = _PHRASES[(joined[-1], word)]
        else:
            joined.append(word)
    synonyms = _synonym_of()
    return [synonyms.get(_stem(word), word) for word in joined]


@functools.cache
def _contrast_index() -> dict[str, frozenset[int]]:
    index: dict[str, set[int]] = {}
    for number, line in enumerate(_CONTRAST_CLASSES):
        for word in line.split():
            index.setdefault(_stem(word), set()).add(number)
    return {word: frozenset(classes) for word, classes in index.items()}


@functools.lru_cache(maxsize=1 << 16)  # a language's words, not a run's texts: bounded all the same
def _stem(word: str) -> str:
    """A light stemming, so "subtracting" meets "subtract" and "roots" meets "root" (not a full stemmer)."""
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            if suffix in ("ing", "ed") and word[-1] == word[-2] and word[-1] not in "aeiousl":
                word = word[:-1]  # "plugging" -> "plug", "putting" -> "put"
            break
    return word[:-1] if word.endswith("e") and len(word) > 3 else word


def meaning_difference(a: str, b: str) -> str | None:
    """Why `a` and `b` are different lessons (see the module doc), or None when no difference is found."""
    if sorted(_NUMBER.findall(a)) != sorted(_NUMBER.findall(b)):
        return "different numbers"
    if sorted(_operators(a)) != sorted(_operators(b)):
        return "different operators"
    words_a, words_b = words(a), words(b)
    if words_a == words_b:
        return None
    if sorted(words_a) == sorted(words_b):
        return "the same words in another order"
    if bool(set(words_a) & _NEGATIONS) != bool(set(words_b) & _NEGATIONS):
        return "a negation on one side only"
    if lexical_similarity(a, b) < SAME_TEMPLATE:
        return None  # in other words: "add up to" may be "sum to"; the embedding judges
    return _template_difference(a, b, words_a, words_b)


def _template_difference(a: str, b: str, words_a: list[str], words_b: list[str]) -> str | None:
    """The checks for one sentence with words changed: which words changed, and do they matter?"""
    if sorted(_number_words(words_a)) != sorted(_number_words(words_b)):
        return "different numbers"
    if sorted(w for w in words_a if w in _NEGATIONS) != sorted(w for w in words_b if w in _NEGATIONS):
        return "a negation one side has once more"  # "are not included" / "are included", beside an "avoid"
    if sorted(_SYMBOL.findall(a)) != sorted(_SYMBOL.findall(b)):
        return "different symbols"  # C(5, 2) / P(5, 2), x / y
    (terms_a, surface_a), (terms_b, surface_b) = _terms(a), _terms(b)
    only_a, only_b = sorted(terms_a - terms_b), sorted(terms_b - terms_a)
    surface = {**surface_b, **surface_a}
    if only_a and only_b and (contrast := _contrast(only_a, only_b)):
        return f"a contrast: {contrast}"
    qualifier = next((w for w in only_a or only_b if w in _contrast_index() and w not in _loose_stems()), None)
    if qualifier and not (only_a and only_b):
        return f"a qualifier one side lacks: {qualifier!r}"  # "even perfect numbers" / "perfect numbers"
    # a word added or dropped is a condition unless it is among the commonest words; a word swapped for
    # another may be a synonym ("use" / "apply") unless it is a specific term ("incenter" / "circumcenter")
    bound = CONTENT_ZIPF if not (only_a and only_b) else SPECIFIC_ZIPF
    lacking = [surface[w] for w in [*only_a, *only_b] if _is_term(surface[w], bound)]
    if lacking:
        return f"a term one side lacks: {lacking[0]!r}"
    return None


def _terms(text: str) -> tuple[Counter[str], dict[str, str]]:
    """The text's words as a multiset of stems, synonyms in one form (a word said twice and once is a change),
    and a word as written for each stem."""
    tokens = [_POSSESSIVE.sub("", t) for t in _TOKEN.findall(text)]
    marked = [f"{_NAME_MARK}{t.casefold()}" if _ACRONYM.fullmatch(t) else t.casefold() for t in tokens]
    canonical = _canonical(marked)
    return Counter(_stem(w) for w in canonical), {_stem(w): w for w in canonical}


def _is_term(word: str, bound: float) -> bool:
    """A word that carries content: an acronym or a code identifier, or a word rarer than `bound`."""
    if word.startswith(_NAME_MARK) or not word.isalpha():
        return len(word) > 1
    return zipf(word) < bound


def _operators(text: str) -> list[str]:
    return _OPERATORS.findall(_HYPHENATED.sub(" ", text))


def _number_words(text_words: list[str]) -> list[str]:
    return [_NUMBER_WORDS[w] for w in text_words if w in _NUMBER_WORDS]


def _contrast(only_a: list[str], only_b: list[str]) -> str | None:
    """Two stems of one contrast class, one on each side."""
    index = _contrast_index()
    for word_a in only_a:
        for word_b in only_b:
            if index.get(word_a, frozenset()) & index.get(word_b, frozenset()):
                return f"{word_a!r} / {word_b!r}"
    return None


@functools.lru_cache(maxsize=1 << 16)
def zipf(word: str) -> float:
    """The word's Zipf frequency in English (0 for a word the list does not know)."""
    from wordfreq import zipf_frequency  # its word lists load on first use (~0.2 s)

    return float(zipf_frequency(word, "en"))


__all__ = ["CONTENT_ZIPF", "SAME_TEMPLATE", "SPECIFIC_ZIPF", "meaning_difference", "zipf"]
