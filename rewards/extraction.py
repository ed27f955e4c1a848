"""Finding the final answer in a completion, in linear time (completions can be hundreds of KB).

Order, first hit wins:
1. the LAST `\\boxed{...}` / `\\fbox{...}` whose braces balance (several boxes are not a set of guesses:
   the last box is the answer, so a policy cannot earn reward by boxing many candidates);
2. else the last final-answer line (`Answer: ...`, `**Answer:** ...`, `The final answer is ...`);
3. else the last math expression (a `$...$`, `\\(...\\)`, `\\[...\\]` span, or a bare number, whichever ends last).
"""

from __future__ import annotations

import re
from typing import Literal, NamedTuple

Source = Literal["boxed", "answer_line", "last_expression", "none"]

_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BOX_BARE = re.compile(r"\\boxed +([^\s${}]+)")  # `\boxed 5`, as some models write it
_BRACE_TOKENS = re.compile(r"\\.|[{}]", re.DOTALL)  # an escaped char (`\{`, `\\`) is never a group brace
_ANSWER_LINE = re.compile(
    r"^[ \t>#*_-]*(?:final[ \t]+answer|answer)[ \t]*(?:\*\*)?[ \t]*[:：](?P<ans>[^\n]*)"
    r"|(?:the[ \t]+)?final[ \t]+answer[ \t]+is[ \t]*[:：]?(?P<ans2>[^\n]*)"
    r"|the[ \t]+answer[ \t]+is[ \t]*[:：]?(?P<ans3>[^\n]*)",
    re.IGNORECASE | re.MULTILINE,
)
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?(?:[ \t]*/[ \t]*\d+)?")
_HOPE = re.compile(r"\s*I hope it is correct\.?\s*$", re.IGNORECASE)


class Extraction(NamedTuple):
    answer: str | None
    source: Source


def extract_answer(text: str) -> str | None:
    """The final answer of a completion, or None when there is nothing that looks like one."""
    return extract_with_source(text).answer


def extract_with_source(text: str) -> Extraction:
    if not text:
        return Extraction(None, "none")
    boxed = last_boxed(text)
    if boxed is not None:
        return Extraction(boxed, "boxed")
    line = last_answer_line(text)
    if line is not None:
        return Extraction(line, "answer_line")
    expression = last_math_expression(text)
    if expression is not None:
        return Extraction(expression, "last_expression")
    return Extraction(None, "none")


def matching_braces(text: str) -> dict[int, int]:
    """Position of each `{` that closes -> position of its `}` (one pass, a stack)."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for token in _BRACE_TOKENS.finditer(text):
        char = token.group()
        if char == "{":
            stack.append(token.start())
        elif char == "}" and stack:
            pairs[stack.pop()] = token.start()
    return pairs


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{}`/`\\fbox{}` with balanced braces (an unclosed last box is skipped)."""
    opens = [m.end() - 1 for m in _BOX_OPEN.finditer(text)]
    bare = None
    for m in _BOX_BARE.finditer(text):
        bare = m
    if not opens and bare is None:
        return None
    pairs = matching_braces(text) if opens else {}
    for brace in reversed(opens):
        close = pairs.get(brace)
        if close is not None:
            if bare is not None and bare.start() > close:
                break
            return text[brace + 1 : close].strip()
    return bare.group(1).strip() if bare is not None else None


def last_answer_line(text: str) -> str | None:
    last = None
    for m in _ANSWER_LINE.finditer(text):
        last = m
    if last is None:
        return None
    raw = next(g for g in (last.group("ans"), last.group("ans2"), last.group("ans3")) if g is not None)
    return _clean_answer(raw)


def _clean_answer(raw: str) -> str | None:
    answer = _HOPE.sub("", raw).strip()
    answer = answer.strip("*_ \t")
    span = _last_math_span(answer)
    if span is not None:
        answer = span[0]
    answer = answer.strip().rstrip(".").strip()
    return answer or None


def last_math_expression(text: str) -> str | None:
    span = _last_math_span(text)
    number = None
    for m in _NUMBER.finditer(text):
        number = m
    if number is not None and (span is None or number.end() > span[1]):
        return number.group().replace(" ", "").replace("\t", "")
    return span[0].strip().rstrip(".").strip() or None if span is not None else None


def _last_math_span(text: str) -> tuple[str, int] | None:
    """(content, end position) of the last `$..$`, `$$..$$`, `\\(..\\)` or `\\[..\\]` span; linear scans only."""
    best: tuple[str, int] | None = None
    dollar_parts = text.replace("$$", "$").split("$")
    if len(dollar_parts) >= 3:
        # Odd segments lie between paired dollars; the last complete one is the last inline-math span.
        last_odd = len(dollar_parts) - 2 if len(dollar_parts) % 2 == 1 else len(dollar_parts) - 3
        content = dollar_parts[last_odd]
        end = text.rfind("$") + 1 if len(dollar_parts) % 2 == 1 else _nth_dollar_end(text, last_odd + 1)
        if content.strip():
            best = (content, end)
    for opener, closer in (("\\(", "\\)"), ("\\[", "\\]")):
        close = text.rfind(closer)
        if close == -1:
            continue
        open_ = text.rfind(opener, 0, close)
        if open_ == -1:
            continue
        end = close + len(closer)
        if best is None or end > best[1]:
            best = (text[open_ + len(opener) : close], end)
    return best


def _nth_dollar_end(text: str, n: int) -> int:
    """End position of the n-th dollar delimiter (a `$$` counts as one), 1-based."""
    count = 0
    i = 0
    while i < len(text):
        if text[i] == "$":
            count += 1
            step = 2 if text.startswith("$$", i) else 1
            if count == n:
                return i + step
            i += step
        else:
            i += 1
    return len(text)


__all__ = [
    "Extraction",
    "extract_answer",
    "extract_with_source",
    "last_answer_line",
    "last_boxed",
    "last_math_expression",
]
