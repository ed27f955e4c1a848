"""What in a text can equal a gold answer: plain numbers, plain sums and products, math spans.

Numbers (`42`, `-7`, `0.5`, `3/4`, `1,024`) and sums or products of them written in plain text (`62 + 10`,
`3 * 7`) are read as exact rationals; math spans (`$...$`, `\\(...\\)`, `\\frac{..}{..}`, `\\sqrt{..}`,
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
_ARITHMETIC = re.compile(r"(?<![\w.^/()])\d++(?:[ \t]++[-+*×][ \t]++\d++)++(?![\w^/(]|\.\d)")
_TERM = re.compile(r"([-+]?)\s*(\d+(?:\s*[*×]\s*\d+)*)")
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
    numbers += [str(value) for m in _ARITHMETIC.finditer(text) if (value := _evaluate(m.group())) is not None]
    expressions = []
    for span in spans:
        normalized = normalize_answer(span)
        if exact_value(normalized) is not None:
            numbers.append(normalized)
        elif normalized:
            expressions.append(normalized)
    return numbers, expressions


def _evaluate(chain: str) -> int | None:
    """The value of `62 + 10`, `3 * 7 - 1` (products first); None for a chain too long to be a worked answer."""
    terms = _TERM.findall(chain)
    if not 2 <= len(terms) + sum(product.count("*") + product.count("×") for _, product in terms) <= MAX_TERMS:
        return None
    total = 0
    for sign, product in terms:
        value = 1
        for factor in re.split(r"[*×]", product):
            value *= int(factor)
        total += -value if sign == "-" else value
    return total


__all__ = ["MAX_TERMS", "candidates", "exact_value"]
