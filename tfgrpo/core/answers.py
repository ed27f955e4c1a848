"""What an answer *is*, one meaning each for every layer: its normalised text, its voting class,
the majority vote over a group, and the reward at which a sample counts as correct.

- `normalize_text` is the one text normaliser: NFKC, case folded, runs of whitespace as one space. Two
  texts equal under it are the same text: an experience already in a library, a free-text answer (the
  `exact` and `choice` rewards compare `normalize_answer` then this, articles and edge punctuation dropped).

- `normalize_answer` strips presentation that never changes the value (math delimiters, spacing,
  `\\text{}` wrappers, `\\left`/`\\right`, degrees, currency, a trailing period, unit words after a
  number, `\\dfrac`). Rewards compare gold and prediction on this form.
- `vote_key` is the class two answers must share to vote together: the normalised text with a
  `\\boxed{}` peeled and a leading `x =` dropped; integers in canonical form (`073`, `73`, `73.0` -> `73`),
  other exact rationals as `\\frac{p}{q}` (`1/2`, `0.5`, `\\frac{1}{2}` -> `\\frac{1}{2}`); whitespace removed.
  It merges spellings and equal rationals, not symbolically equal expressions.
- `majority_vote` is the one majority rule, used by maj@k (eval), the ground-truth-free pseudo-label
  (learn) and the `majority` reward. Unparsable answers (None or blank) never vote. **Tie rule:** among
  classes with the most votes, the one whose first vote has the lowest index wins (deterministic and
  independent of anything but the order of the samples). `ties="none"` abstains on a tie instead; only the
  `majority` reward (TRL) uses that, where no pseudo-gold is safer than a coin flip.
- `CORRECT_THRESHOLD`: a sample is correct when its reward is at least 0.5 (math rewards are 0/1);
  a reward of None (the scorer could not decide) is not correct.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Literal

CORRECT_THRESHOLD = 0.5

# A whole answer wrapped in one of these is unwrapped: `\text{5}` is 5.
_WRAPPERS = re.compile(r"^\\(?:text|textbf|textrm|mathrm|mathbf|mbox|operatorname)\s*\{(?P<body>[^{}]*)\}$")
# Thousands separators LaTeX writes: `1\,000`, `11,\!111`, `11,\! 111`.
_LATEX_THOUSANDS = re.compile(r"(?<=\d)(?:\\,|,\s*\\!\s*)(?=\d{3}(?!\d))")
# A spacing command becomes a space; `\\` (a row or line break) is a token of its own and is kept whole.
_SPACING = re.compile(r"\\\\|\\[,;:! ]|\\quad|\\qquad|~")
_LEFT_RIGHT = re.compile(r"\\(?:left|right)(?=[()\[\]|.]|\\[{}|])")
_DEGREE_SIGN = r"\^\s*\{?\s*\\circ\s*\}?|°|\\degree"
_DEGREES = re.compile(_DEGREE_SIGN)
_NUMBER_DEGREES = re.compile(rf"(\d+(?:\.\d+)?)\s*(?:{_DEGREE_SIGN})")
# `\frac\pi4`, `\frac1{72}`: short arguments braced, since math-verify misreads `\frac\pi4` (as 2).
_SHORT_FRACTION = re.compile(r"\\frac\s*(\{[^{}]*\}|\\[A-Za-z]+|[0-9A-Za-z])\s*(\{[^{}]*\}|\\[A-Za-z]+|[0-9A-Za-z])")
_TRIG = re.compile(r"\\(?:arc)?(?:sin|cos|tan|sec|csc|cot)h?(?![A-Za-z])")
_APPROX = re.compile(r"\\approx|≈")
_LONE_NAME = re.compile(r"^(?:[A-Za-z]|\\[A-Za-z]+)(?:_\{?\w+\}?)?$")
# `2.3148 \times 10^{-3}`, `3\cdot10^5`, `2.5e-3`: a decimal in scientific notation.
_SCIENTIFIC = re.compile(
    r"^(?P<mantissa>[+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*(?:(?:\\times|\\cdot|\*)\s*10\s*\^\s*\{?\s*(?P<exp>[+-]?\d{1,3})\s*\}?"
    r"|[eE](?P<exp2>[+-]?\d{1,3}))$"
)
_MIXED_NUMBER = re.compile(
    r"^(?P<sign>[+-]?)(?P<whole>\d+)(?:\s+(?P<num>\d+)\s*/\s*(?P<den>\d+)|\s*\\[dt]?frac\s*\{(?P<num2>\d+)\}\s*\{(?P<den2>\d+)\})$"
)
_CURRENCY = re.compile(r"^(?:\\\$|\$|USD\s*|€|£)\s*|\s*(?:\\\$|USD|€|£)$")
_PERCENT = re.compile(r"\s*\\?%$")
# Trailing unit words after a number: `10 cm`, `5 \text{ dollars}`, `3 apples`; one-letter words are algebra.
# Each unit is matched whole (an atomic group, possessive spaces): a run of words that is not all units fails
# at once, where alternatives that could split a word ("forty" as "fo" + "rty") would try every split.
_NUMBER_THEN_UNITS = re.compile(
    r"^(?P<number>[+-]?[\d.,/]+)\s*+(?>(?:\\text|\\mbox|\\mathrm)\s*\{\s*[A-Za-z][A-Za-z .^\d]*\}(?:\^\{?\d\}?)?"
    r"|[A-Za-z]{1,2}[²³]|[A-Za-z]{2,}\.?(?:\^\{?\d\}?)?|\s)+$"
)
_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(?:(?:,|\{,\}|\\,| )\d{3})+(?:\.\d+)?$")
_INTEGER = re.compile(r"^[+-]?\d+$")
_PLAIN_NUMBER = re.compile(r"^[+-]?\d+(?:\.\d+)?$")
_DECIMAL = re.compile(r"^[+-]?(?:\d+\.\d*|\.\d+)$")
_SLASH_FRACTION = re.compile(r"^(?P<sign>[+-]?)(?P<num>\d+)\s*/\s*(?P<den>\d+)$")
_LATEX_FRACTION = re.compile(
    r"^(?P<sign>[+-]?)\\[dt]?frac\s*(?:\{\s*(?P<num>\d+)\s*\}|(?P<num1>\d))\s*(?:\{\s*(?P<den>\d+)\s*\}|(?P<den1>\d))$"
)

MAX_FAST_DIGITS = 4000  # beyond this, Fraction(...) would trip Python's int-string conversion limit


def normalize_text(text: str) -> str:
    """NFKC, case folded, single spaces, stripped."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def normalize_answer(answer: str) -> str:
    """Strip presentation that never changes the value: math delimiters, spacing, `\\text{}` wrappers,
    `\\left`/`\\right`, degrees, currency, a trailing period, unit words after a number, `\\dfrac`.

    LaTeX structure is kept: a `\\\\` row break is never touched (a column vector stays a column vector)."""
    text = answer.strip()
    if _PLAIN_NUMBER.match(text):  # the common case (AIME, GSM8K): nothing below would change it
        return text
    if text.endswith("\\") and not text.endswith("\\\\"):
        text = text[:-1].rstrip()  # a lone trailing backslash is a typo, not a command
    for _ in range(3):  # wrappers can nest ($\text{5}$); a few rounds cover real answers
        before = text
        text = _strip_delimiters(text)
        text = _exact_side(text)
        text = _LATEX_THOUSANDS.sub("", text)  # 1\,000 and 1,\!000 are one thousand, not "1 000"
        text = _SPACING.sub(lambda m: m.group() if m.group() == "\\\\" else " ", text).strip()
        match = _WRAPPERS.match(text)
        if match:
            text = match.group("body").strip()
        text = text.rstrip(".").strip()
        if text == before:
            break
    text = _LEFT_RIGHT.sub("", text)
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    text = _SHORT_FRACTION.sub(lambda m: f"\\frac{{{_unbraced(m.group(1))}}}{{{_unbraced(m.group(2))}}}", text)
    text = text.replace("\\mathrm{e}", "e").replace("\\mathrm{i}", "i")
    # A degree sign is a unit on a plain angle (`90^\\circ` is 90), but inside a trig function it is the
    # argument's scale: `\\sin(90^\\circ - x)` is cos x, not sin(90 - x).
    if _TRIG.search(text):
        text = _NUMBER_DEGREES.sub(lambda m: f"(\\frac{{{m.group(1)}\\pi}}{{180}})", text)
        text = _DEGREES.sub(lambda _: "\\cdot\\frac{\\pi}{180}", text).strip()
    else:
        text = _DEGREES.sub("", text).strip()
    text = _CURRENCY.sub("", text).strip()
    # A percent sign is a unit: 25\% is 25 (never also 0.25), so one gold cannot match two different numbers.
    text = _PERCENT.sub("", text).strip()
    units = _NUMBER_THEN_UNITS.match(text)
    if units:
        text = units.group("number")
    if _THOUSANDS.match(text):
        text = text.replace("{,}", "").replace("\\,", "").replace(",", "").replace(" ", "")
    return _plain_decimal(text)


def _unbraced(argument: str) -> str:
    return argument[1:-1] if argument.startswith("{") else argument


def _exact_side(text: str) -> str:
    """`\\frac{\\sqrt3}{3} \\approx 0.577` is its exact value; `x \\approx 11` is its approximation (a lone name)."""
    match = _APPROX.search(text)
    if match is None:
        return text
    left, right = text[: match.start()].strip(), text[match.end() :].strip()
    return right if _LONE_NAME.match(left) else left


def _plain_decimal(text: str) -> str:
    """`2.3148 \\times 10^{-3}` -> `0.0023148` (exact: the decimal point moves, nothing is rounded)."""
    match = _SCIENTIFIC.match(text)
    if match is None:
        return text
    value = Decimal(match.group("mantissa")).scaleb(int(match.group("exp") or match.group("exp2")))
    return format(value, "f")


def _strip_delimiters(text: str) -> str:
    for opener, closer in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if len(text) >= len(opener) + len(closer) and text.startswith(opener) and text.endswith(closer):
            return text[len(opener) : len(text) - len(closer)].strip()
    return text


def canonical_integer(text: str) -> str | None:
    """`-073` -> `-73`; None when `text` is not a plain integer. Works at any size (no int())."""
    if not _INTEGER.match(text):
        return None
    sign = "-" if text[0] == "-" else ""
    digits = text.lstrip("+-").lstrip("0") or "0"
    return "0" if digits == "0" else sign + digits


def as_fraction(text: str) -> tuple[Fraction, bool] | None:
    """(value, is_exact) for an integer, decimal, `a/b` or `\\frac{a}{b}`; is_exact is False for decimals."""
    if len(text) > MAX_FAST_DIGITS:
        return None
    if _INTEGER.match(text):
        return Fraction(int(text)), True
    if _DECIMAL.match(text):
        return Fraction(text), False
    mixed = _MIXED_NUMBER.match(text)
    if mixed:  # `1 1/2` and `1\\frac{1}{2}` are one and a half
        num, den = int(mixed.group("num") or mixed.group("num2")), int(mixed.group("den") or mixed.group("den2"))
        if den == 0:
            return None
        value = int(mixed.group("whole")) + Fraction(num, den)
        return (-value if mixed.group("sign") == "-" else value), True
    match = _SLASH_FRACTION.match(text) or _LATEX_FRACTION.match(text)
    if match:
        groups = match.groupdict()
        # `num` always matches in a/b; in \frac exactly one of `num`/`num1` does (likewise den), so never None.
        num = int(groups.get("num") or groups["num1"])
        den = int(groups.get("den") or groups["den1"])
        if den == 0:
            return None
        value = Fraction(num, den)
        return (-value if groups["sign"] == "-" else value), True
    return None


def is_correct(reward: float | None, threshold: float = CORRECT_THRESHOLD) -> bool:
    """Whether a sample's reward counts as correct (None, undecided, does not)."""
    return reward is not None and reward >= threshold


_BOXED = re.compile(r"^\\(?:boxed|fbox)\s*\{(?P<body>.*)\}$", re.DOTALL)
_VARIABLE_IS = re.compile(r"^[a-zA-Z]\s*=\s*")


def vote_key(answer: str) -> str:
    """The canonical form two answers must share to vote together (see the module doc)."""
    normal = normalize_answer(answer)
    for _ in range(3):  # \boxed{x = 5} or x = \boxed{5}: peel in any order
        before = normal
        boxed = _BOXED.match(normal)
        if boxed:
            normal = normalize_answer(boxed.group("body"))
        normal = normalize_answer(_VARIABLE_IS.sub("", normal))
        if normal == before:
            break
    integer = canonical_integer(normal)
    if integer is not None:
        return integer
    exact = as_fraction(normal)
    if exact is not None:
        value = exact[0]
        if value.denominator == 1:
            return str(value.numerator)
        sign = "-" if value < 0 else ""
        return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"
    return "".join(normal.split())


TieRule = Literal["first", "none"]


@dataclass(frozen=True)
class Vote:
    """The winning class of a majority vote."""

    key: str  # its vote_key
    first: str  # its first spelling, as given
    indices: tuple[int, ...]  # positions (in the answers given) of every vote for it


def majority_vote(answers: Sequence[str | None], *, ties: TieRule = "first", min_share: float = 0.0) -> Vote | None:
    """The majority class of `answers`, or None: nothing parsable, a tie under `ties="none"`, or fewer votes
    than `min_share` of ALL answers (unparsable ones included)."""
    if ties not in ("first", "none"):
        raise ValueError(f"ties must be 'first' or 'none', got {ties!r}")
    keys = [vote_key(a) if a is not None and a.strip() else None for a in answers]
    counts = Counter(key for key in keys if key)
    if not counts:
        return None
    top = max(counts.values())
    tied = [key for key in counts if counts[key] == top]  # Counter keeps first-appearance order
    if (len(tied) > 1 and ties == "none") or top < min_share * len(answers):
        return None
    winner = tied[0]
    indices = tuple(i for i, key in enumerate(keys) if key == winner)
    return Vote(key=winner, first=str(answers[indices[0]]), indices=indices)


__all__ = [
    "CORRECT_THRESHOLD",
    "MAX_FAST_DIGITS",
    "TieRule",
    "Vote",
    "as_fraction",
    "canonical_integer",
    "is_correct",
    "majority_vote",
    "normalize_answer",
    "normalize_text",
    "vote_key",
]
