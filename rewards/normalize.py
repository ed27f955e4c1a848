"""Cheap, exact string-level normalisation of answers, and the fast path that decides plain numbers.

Everything here is pure Python string work (no sympy), so it runs in the caller's process: integer
answers, by far the most common (GSM8K, AIME), never pay for a round trip to a worker. Only what this
module leaves undecided goes to math-verify.
"""

from __future__ import annotations

import re
from fractions import Fraction

# A whole answer wrapped in one of these is unwrapped: `\text{5}` is 5.
_WRAPPERS = re.compile(r"^\\(?:text|textbf|textrm|mathrm|mathbf|mbox|operatorname)\s*\{(?P<body>[^{}]*)\}$")
_THIN_SPACE_THOUSANDS = re.compile(r"(?<=\d)\\,(?=\d{3}(?!\d))")
_SPACING = re.compile(r"\\[,;:! ]|\\quad|\\qquad|~")
_LEFT_RIGHT = re.compile(r"\\(?:left|right)(?=[()\[\]|.]|\\[{}|])")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|°|\\degree")
_CURRENCY = re.compile(r"^(?:\\\$|\$|USD\s*|€|£)\s*|\s*(?:\\\$|USD|€|£)$")
_PERCENT = re.compile(r"\s*\\?%$")
# Trailing unit words after a number: `10 cm`, `5 \text{ dollars}`, `3 apples`; one-letter words are algebra.
_NUMBER_THEN_UNITS = re.compile(
    r"^(?P<number>[+-]?[\d.,/]+)\s*(?:(?:\\text|\\mbox|\\mathrm)\s*\{\s*[A-Za-z][A-Za-z .^\d]*\}|[A-Za-z]{2,}\.?|\s)+$"
)
_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(?:(?:,|\{,\}|\\,)\d{3})+(?:\.\d+)?$")
_INTEGER = re.compile(r"^[+-]?\d+$")
_DECIMAL = re.compile(r"^[+-]?(?:\d+\.\d*|\.\d+)$")
_SLASH_FRACTION = re.compile(r"^(?P<sign>[+-]?)(?P<num>\d+)\s*/\s*(?P<den>\d+)$")
_LATEX_FRACTION = re.compile(r"^(?P<sign>[+-]?)\\[dt]?frac\s*(?:\{\s*(?P<num>\d+)\s*\}|(?P<num1>\d))\s*(?:\{\s*(?P<den>\d+)\s*\}|(?P<den1>\d))$")

MAX_FAST_DIGITS = 4000  # beyond this, Fraction(...) would trip Python's int-string conversion limit


def normalize_answer(answer: str) -> str:
    """Strip presentation that never changes the value: math delimiters, spacing, `\\text{}` wrappers,
    `\\left`/`\\right`, degrees, currency, a trailing period, unit words after a number, `\\dfrac`."""
    text = answer.strip()
    for _ in range(3):  # wrappers can nest ($\text{5}$); a few rounds cover real answers
        before = text
        text = _strip_delimiters(text)
        text = _THIN_SPACE_THOUSANDS.sub("", text)  # 1\,000 is one thousand, not "1 000"
        text = _SPACING.sub(" ", text).strip()
        match = _WRAPPERS.match(text)
        if match:
            text = match.group("body").strip()
        text = text.rstrip(".").strip()
        if text == before:
            break
    text = _LEFT_RIGHT.sub("", text)
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    text = _DEGREES.sub("", text).strip()
    text = _CURRENCY.sub("", text).strip()
    # A percent sign is a unit: 25\% is 25 (never also 0.25), so one gold cannot match two different numbers.
    text = _PERCENT.sub("", text).strip()
    units = _NUMBER_THEN_UNITS.match(text)
    if units:
        text = units.group("number")
    if _THOUSANDS.match(text):
        text = text.replace("{,}", "").replace("\\,", "").replace(",", "")
    return text


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


def fast_equivalent(gold: str, pred: str) -> bool | None:
    """Decide equivalence of two normalised answers without sympy, or None to defer to math-verify.

    Integers compare exactly at any size. Fractions and decimals compare exactly as rationals; only a
    decimal against a non-decimal that differ is deferred, so math-verify's rounding can accept 1/3 = 0.333333.
    """
    if not gold or not pred:
        return None
    if gold == pred:
        return True
    gold_int, pred_int = canonical_integer(gold), canonical_integer(pred)
    if gold_int is not None and pred_int is not None:
        return gold_int == pred_int
    gold_q, pred_q = as_fraction(gold), as_fraction(pred)
    if gold_q is None or pred_q is None:
        return None
    (gold_value, gold_exact), (pred_value, pred_exact) = gold_q, pred_q
    if gold_value == pred_value:
        return True
    if gold_exact and pred_exact:
        return False
    if gold_q[1] == pred_q[1] or gold_int is not None:
        # decimal vs decimal, or an exact integer gold: no rounding leniency (10000 is not 9999.9999999)
        return False
    return None


__all__ = ["MAX_FAST_DIGITS", "as_fraction", "canonical_integer", "fast_equivalent", "normalize_answer"]
