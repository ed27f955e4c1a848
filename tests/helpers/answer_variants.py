"""Rewritings of real reference answers: ones that keep the value (must score 1.0) and ones that change it
(must score 0.0). Used by the MATH property tests and by benchmarks/answer_equivalence.py.

Each generator returns (kind, completion) pairs; a kind names the rewriting so a failure says what broke.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

MATH_ANSWERS = Path(__file__).parents[1] / "data" / "math_test_answers.jsonl"

_INTEGER = re.compile(r"^-?\d+$")
_PLAIN_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?$")
# A space that no LaTeX reading needs: not between letters (`\pi r`), after a backslash (`\ `) or a comma
# (`45, 135` is a list, `45,135` a number).
_REMOVABLE_SPACE = re.compile(r"(?<![A-Za-z\\,])\s+(?![A-Za-z])|(?<![A-Za-z\\,])\s+(?=[A-Za-z])(?<=[^A-Za-z]\s)")
_MATRIX = re.compile(r"^\\begin\{([pb]matrix)\}(?P<body>.*)\\end\{\1\}$", re.DOTALL)
_TUPLE = re.compile(r"^\((?P<body>[^()\[\]{}]*)\)$")
_DIGITS = re.compile(r"(?<![_\d])\d+")  # not a base subscript (`1200_7`)
_BASE = re.compile(r"(?<=\d)_(\{?)(\d+)(\}?)")
_TEXT_ONLY = re.compile(r"^\\text\s*\{[^{}]*\}$")
_SIGNED_VALUE = re.compile(r"^-?(?:\\[dt]?frac\{\d+\}\{\d+\}|\d+\.\d+|\d*\\sqrt\{\d+\}|\d*\\pi)$")


def math_answers() -> list[dict]:
    return [json.loads(line) for line in MATH_ANSWERS.read_text().splitlines() if line.strip()]


def _thousands(integer: str, separator: str) -> str:
    sign, digits = ("-", integer[1:]) if integer.startswith("-") else ("", integer)
    groups = []
    while digits:
        groups.insert(0, digits[-3:])
        digits = digits[:-3]
    return sign + separator.join(groups)


def equivalent_rewritings(answer: str) -> list[tuple[str, str]]:
    """Completions whose final answer has the same value as `answer`, written differently."""
    out = [
        ("boxed", f"Putting it together, the answer is \\boxed{{{answer}}}."),
        ("answer line", f"So we are done.\nThe answer is ${answer}$."),
        ("final answer line", f"Final Answer: The final answer is ${answer}$. I hope it is correct."),
    ]
    squeezed = _REMOVABLE_SPACE.sub("", answer)
    if squeezed != answer and not _TEXT_ONLY.match(answer):
        out.append(("spacing removed", f"\\boxed{{{squeezed}}}"))
    spaced = re.sub(r"([+=<>])", r" \1 ", answer)
    if spaced != answer:
        out.append(("spacing added", f"\\boxed{{{spaced}}}"))
    if "\\frac" in answer:
        out.append(("dfrac", f"\\boxed{{{answer.replace(chr(92) + 'frac', chr(92) + 'dfrac')}}}"))
    if "(" in answer and ")" in answer and "\\left" not in answer:
        out.append(
            ("left/right", f"\\boxed{{{answer.replace('(', chr(92) + 'left(').replace(')', chr(92) + 'right)')}}}")
        )
    if _INTEGER.match(answer) and len(answer.lstrip("-")) > 3:
        for separator in (",", "{,}", ",\\!", "\\,"):
            out.append((f"thousands {separator}", f"\\boxed{{{_thousands(answer, separator)}}}"))
    if _PLAIN_NUMBER.match(answer):
        out.append(("unit in text", f"\\boxed{{{answer}\\text{{ units}}}}"))
    return out


def wrong_rewritings(answer: str) -> list[tuple[str, str]]:
    """Completions whose final answer has a different value from `answer` (it must score 0.0)."""
    out: list[tuple[str, str]] = []
    if _TEXT_ONLY.match(answer):  # `\text{4:30 p.m.}` is not math: such a reference scores None, never 1.0
        return out
    if _INTEGER.match(answer):
        value = int(answer)
        out += [("plus one", f"\\boxed{{{value + 1}}}"), ("minus one", f"\\boxed{{{value - 1}}}")]
        if value != 0:
            out.append(("sign flipped", f"\\boxed{{{-value}}}"))
        digits = answer.lstrip("-")
        if len(digits) > 1:
            dropped = digits[:-1] if digits[:-1].lstrip("0") else digits[1:]
            if dropped.lstrip("0") and int(dropped) != abs(value):
                out.append(("digit dropped", f"\\boxed{{{'-' if value < 0 else ''}{dropped}}}"))
        return out
    if _SIGNED_VALUE.match(answer):
        out.append(("sign flipped", f"\\boxed{{{answer[1:] if answer.startswith('-') else '-' + answer}}}"))
    matrix = _MATRIX.match(answer)
    if matrix:
        rows = [row.strip() for row in matrix.group("body").split("\\\\")]
        if len(rows) > 1 and len({re.sub(r"\s", "", row) for row in rows}) > 1:
            swapped = "\\\\ ".join(reversed(rows))
            if [re.sub(r"\s", "", row) for row in rows] != [re.sub(r"\s", "", row) for row in reversed(rows)]:
                out.append(
                    ("rows reversed", f"\\boxed{{\\begin{{{matrix.group(1)}}}{swapped}\\end{{{matrix.group(1)}}}}}")
                )
    tuple_ = _TUPLE.match(answer)
    if tuple_:
        items = [item.strip() for item in tuple_.group("body").split(",")]
        if len(items) > 1 and items != items[::-1]:
            out.append(("tuple reversed", f"\\boxed{{({', '.join(reversed(items))})}}"))
    numbers = list(_DIGITS.finditer(answer))
    if numbers and not matrix:  # the first number: a unit's exponent (`cm^2`) comes last
        first = numbers[0]
        bumped = answer[: first.start()] + str(int(first.group()) + 1) + answer[first.end() :]
        out.append(("first number plus one", f"\\boxed{{{bumped}}}"))
    base = _BASE.search(answer)
    if base:
        other = f"_{base.group(1)}{int(base.group(2)) + 1}{base.group(3)}"
        out.append(("base changed", f"\\boxed{{{answer[: base.start()] + other + answer[base.end() :]}}}"))
    return out


__all__ = ["equivalent_rewritings", "math_answers", "wrong_rewritings"]
