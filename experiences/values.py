"""What in a text can equal a gold answer: plain numbers, plain sums and products, math spans.

Numbers (`42`, `-7`, `0.5`, `3/4`, `1,024`, and "forty-five" read by text2num) and sums or products of them written in plain text (`62 + 10`,
`3 * 7`, `2^5 - 1`, `3 \\cdot 2^7`) are read as exact rationals; math spans (`$...$`, `\\(...\\)`, `\\frac{..}{..}`, `\\sqrt{..}`,
`\\boxed{..}`) are read as numbers when they are one and as expressions for math-verify otherwise. A sum
is a term of a formula, not a sum, when a letter, a power or a bracket touches it (`x^3 + 6`, `2x - 4y`), and
a range when its sign has no space around it (`pages 10-20`).

Every pattern reads each character a bounded number of times (tests/experiences/test_scanners_adversarial.py).
"""

from __future__ import annotations

import re
from fractions import Fraction

from tfgrpo.core.answers import as_fraction, normalize_answer
from tfgrpo.experiences.naming import INLINE_MATH

_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+)?(?![\w])")
# Possessive repeats: a chain of n terms that fails at its end is not re-read from each of its terms.
_ARITHMETIC = re.compile(
    r"(?<![\w.^/()])\d++(?:\^\d++)?(?:[ \t]++(?:[-+*×·]|\\cdot)[ \t]++\d++(?:\^\d++)?)*+(?![\w^/(]|\.\d)"
)
_TOKEN = re.compile(r"\d+\^\d+|\d+|\\cdot|[-+*×·]")
_NUMBER_WORD = re.compile(
    r"(?i)\b(?:zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|"
    r"sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred|thousand)\b"
)
_MINUS = re.compile(r"\bminus\s+(?=\d)")
#: A power with a larger exponent is not an answer worked out (and 2^10^6 is not computed).
MAX_EXPONENT = 64
_LATEX_COMMAND = re.compile(r"\\(?:[dt]?frac|sqrt|binom|boxed)\s*(?:\[[^\]]*\])?(?:\s*\{(?:[^{}]|\{[^{}]*\})*\})+")
#: Sums hold at most this many terms: a longer chain is a list or a formula, not an answer worked out.
MAX_TERMS = 4


def exact_value(normalized: str) -> Fraction | None:
    parsed = as_fraction(normalized.replace(" ", ""))
    return parsed[0] if parsed is not None else None


def candidates(text: str) -> tuple[list[str], list[str]]:
    """(plain numbers, math spans) found in a text; a span that is a plain number also counts as a number, and
    a plain sum or product (`62 + 10`) counts as the number it comes to."""
    spans = [next(g for g in m.groups() if g is not None) for m in INLINE_MATH.finditer(text)]
    spans += [m.group() for m in _LATEX_COMMAND.finditer(text)]
    numbers = [m.group().replace(",", "") for m in _NUMBER.finditer(text)]
    if _NUMBER_WORD.search(text):
        numbers += [m.group().replace(",", "") for m in _NUMBER.finditer(spelled_as_digits(text))]
    numbers += [str(value) for m in _ARITHMETIC.finditer(text) if (value := _evaluate(m.group())) is not None]
    expressions = []
    for span in spans:
        normalized = normalize_answer(span)
        if exact_value(normalized) is not None:
            numbers.append(normalized)
        elif normalized:
            expressions.append(normalized)
    return numbers, expressions


def spelled_as_digits(text: str) -> str:
    """The text with its numbers written in words as digits ("minus five hundred eighty-eight" is -588), by
    text2num's English parser; lone small numbers ("one case", "two cards") stay words, as the parser keeps them."""
    from text_to_num import alpha2digit  # a compiled parser: imported where the guard reads a spelled number

    return _MINUS.sub("-", alpha2digit(text, "en"))


def _evaluate(chain: str) -> int | None:
    """The value of `62 + 10`, `3 * 7 - 1`, `2^5 - 1`, `3 \\cdot 2^7` (powers, then products, then sums); None for
    a lone number, a chain too long to be a worked answer, or a power too large."""
    tokens = _TOKEN.findall(chain)
    factors = tokens[::2]
    if len(factors) > MAX_TERMS or (len(factors) == 1 and "^" not in factors[0]):
        return None
    values = []
    for factor in factors:
        base, _, exponent = factor.partition("^")
        if exponent and int(exponent) > MAX_EXPONENT:
            return None
        values.append(int(base) ** int(exponent) if exponent else int(base))
    total, product, sign = 0, values[0], 1
    for operator, value in zip(tokens[1::2], values[1:], strict=True):
        if operator in "+-":
            total, product, sign = total + sign * product, value, 1 if operator == "+" else -1
        else:
            product *= value
    return total + sign * product


__all__ = ["MAX_TERMS", "candidates", "exact_value"]
