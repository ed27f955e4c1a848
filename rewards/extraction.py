"""Finding the final answer in a completion, in linear time (completions can be hundreds of KB).

Order, first hit wins:
1. the LAST `\\boxed{...}` / `\\fbox{...}` whose braces balance (several boxes are not a set of guesses:
   the last box is the answer, so a policy cannot earn reward by boxing many candidates; an answer of
   several values goes in one box, `\\boxed{1, -2}`), unless a final-answer line comes after it;
2. else the last final-answer line (`Answer: ...`, `**Answer:** ...`, `The final answer is ...`), read as
   its first math span, else the value after its last word ("The largest $n$ is 34." -> 34);
3. else the whole completion when it is a bare answer (no prose: `\\frac{1}{2}`, `x^2+2x+1`, `.4`);
4. else the formula that ends the last line ("so x = \\frac{1}{9}" -> `x = \\frac{1}{9}`), else the last
   math span or stand-alone number, whichever ends last. A digit inside LaTeX structure (`\\frac{1}{9}`,
   `\\sqrt{2}`, `x^3`) is never read as a number of its own.
"""

from __future__ import annotations

import re
from typing import Literal, NamedTuple

Source = Literal["boxed", "answer_line", "whole", "last_expression", "none"]

_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BOX_BARE = re.compile(r"\\boxed +([^\s${}]+)")  # `\boxed 5`, as some models write it
_BRACE_TOKENS = re.compile(r"\\.|[{}]", re.DOTALL)  # an escaped char (`\{`, `\\`) is never a group brace
# What may stand between the math spans of one listed answer ("$12$ and $13$"): punctuation, spacing, and/or.
_BOX_CONNECTOR = re.compile(
    r"(?:\s|[,;]|\$|\\[()\[\]]|\\[,;:! ]|\\q?quad|\\text\s*\{\s*(?:and|or|,)?\s*\}|\band\b|\bor\b)*", re.IGNORECASE
)
_CONNECTOR_MAX_CHARS = 40
_MATH_SPAN = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)
_ANSWER_LINE = re.compile(
    r"^[ \t>#*_-]*(?:final[ \t]+answer|answer)[ \t]*(?:\*\*)?[ \t]*[:：](?P<ans>[^\n]*)"
    r"|(?:the[ \t]+)?final[ \t]+answer[ \t]+is[ \t]*[:：]?(?P<ans2>[^\n]*)"
    r"|the[ \t]+answer[ \t]+is[ \t]*[:：]?(?P<ans3>[^\n]*)",
    re.IGNORECASE | re.MULTILINE,
)
# A number of its own: not part of a word, a decimal, or LaTeX structure (`\frac{1}{9}`, `\sqrt{2}`, `x^3`, `3^2`).
_NUMBER = re.compile(r"(?<![\w.{}^_\\])-?\d+(?:,\d{3})*(?:\.\d+)?(?:[ \t]*/[ \t]*\d+)?(?!\d|\.\d|[ \t]*[\^_{}])")
_HOPE = re.compile(r"\s*I hope it is correct\b.*", re.IGNORECASE | re.DOTALL)
# Prose: a word of letters that is not a LaTeX command, a function name or text inside `\text{}`.
_TEXT_GROUP = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mathbf|mbox|operatorname|begin|end)\s*\{[^{}]*\}")
_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}")
_MATH_WORDS = frozenset(
    "sin cos tan sec csc cot arcsin arccos arctan sinh cosh tanh log exp lim max min gcd lcm mod deg det"
    " inf infty sqrt frac dfrac".split()
)
# Two-letter words are algebra (`xy`, `ab`) or units (`cm`), except these.
_SHORT_WORDS = frozenset("is so we if of to in on at by or an as be it no".split())
_MATH_CONTENT = re.compile(r"\d|\\[A-Za-z]+|^[A-Za-z]$")
_ESCAPED_DOLLAR, _DOLLAR_MASK = "\\$", "\x00\x00"  # same length: positions in the masked text hold
BARE_MAX_CHARS = 300  # a longer completion without prose is read from its end, not whole


class Extraction(NamedTuple):
    answer: str | None
    source: Source


def extract_answer(text: str) -> str | None:
    """The final answer of a completion, or None when there is nothing that looks like one."""
    return extract_with_source(text).answer


def extract_with_source(text: str) -> Extraction:
    if not text or not text.strip():
        return Extraction(None, "none")
    boxes = _boxes(text)
    # A final-answer line written after the last box restates the answer: the later statement wins.
    line = _last_answer_match(text[boxes[-1][1] :] if boxes else text)
    if boxes and line is None:
        return Extraction(boxes[-1][2], "boxed")
    answer = _clean_answer(_answer_group(line)) if line is not None else None
    if answer is not None:
        return Extraction(answer, "answer_line")
    if is_bare_answer(text):
        return Extraction(text.strip().rstrip(".").strip(), "whole")
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


def _boxes(text: str) -> list[tuple[int, int, str]]:
    """(start, end, content) of every box with balanced braces, in order; `\\boxed 5` counts too."""
    opens = [(m.start(), m.end() - 1) for m in _BOX_OPEN.finditer(text)]
    pairs = matching_braces(text) if opens else {}
    boxes = [
        (start, pairs[brace] + 1, text[brace + 1 : pairs[brace]].strip()) for start, brace in opens if brace in pairs
    ]
    if "\\boxed " in text:
        boxes += [(m.start(), m.end(), m.group(1).strip()) for m in _BOX_BARE.finditer(text)]
        boxes.sort()
    if len(boxes) < 2:
        return boxes
    # A box inside another (\boxed{\boxed{5}}) is part of the outer one's answer.
    outer = [boxes[0]]
    for box in boxes[1:]:
        if box[0] >= outer[-1][1]:
            outer.append(box)
    return outer


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{}`/`\\fbox{}` with balanced braces (an unclosed last box is skipped)."""
    boxes = _boxes(text)
    return boxes[-1][2] if boxes else None


def all_boxes(text: str) -> str | None:
    """Every distinct box of a text, joined with ", " (a trusted reference with several answers keeps them all)."""
    contents = list(dict.fromkeys(content for _, _, content in _boxes(text)))
    return ", ".join(contents) if contents else None


def _prose_words(text: str) -> list[re.Match[str]]:
    """The words of a text that are prose: not LaTeX commands, function names, `\\text{}` or short algebra."""
    masked = _TEXT_GROUP.sub(lambda m: " " * len(m.group()), text)  # same positions, text groups blanked
    return [
        word
        for word in _WORD.finditer(masked)
        if (len(word.group()) > 2 and word.group().lower() not in _MATH_WORDS) or word.group().lower() in _SHORT_WORDS
    ]


def has_prose(text: str) -> bool:
    """Whether a text has words in it (beyond LaTeX commands, function names, units and `\\text{}`)."""
    return bool(_prose_words(text))


def is_bare_answer(text: str) -> bool:
    """A completion that is only an answer: short, on few lines, without prose."""
    stripped = text.strip()
    return 0 < len(stripped) <= BARE_MAX_CHARS and not has_prose(stripped)


def last_answer_line(text: str) -> str | None:
    """The answer the last final-answer line states (see `_clean_answer`), or None."""
    line = _last_answer_match(text)
    return _clean_answer(_answer_group(line)) if line is not None else None


def _last_answer_match(text: str) -> re.Match[str] | None:
    last = None
    for m in _ANSWER_LINE.finditer(text):
        last = m
    return last


def _answer_group(line: re.Match[str]) -> str:
    return next(g for g in (line.group("ans"), line.group("ans2"), line.group("ans3")) if g is not None)


def _clean_answer(raw: str) -> str | None:
    """The answer an answer line states: its first math span when it opens with one; the line itself when it
    has no prose; else the formula after its last word; else its first math span or number; else the text."""
    answer = _HOPE.sub("", raw).strip().strip("*_ \t")
    if not answer:
        return None
    listed = _listed_spans(answer)
    if listed is not None:
        return listed
    opening = _first_math_span(answer)
    if opening is not None and not answer[: opening[2]].strip():
        return _trim(opening[0])
    if not has_prose(answer):
        return _trim(_strip_outer_delimiters(answer))
    tail = _formula_after_last_word(answer)
    if tail is not None:
        return tail
    first = _first_math_span(answer)
    if first is not None:
        return _trim(first[0])
    number = _NUMBER.search(answer)
    return number.group() if number is not None else _trim(answer)


def _listed_spans(answer: str) -> str | None:
    """`$12$ and $13$`: several math spans that only connectors separate are one answer, `12, 13`."""
    if len(answer) > BARE_MAX_CHARS:  # a list of answers is short; the span scan is quadratic on hostile lines
        return None
    masked = answer.replace(_ESCAPED_DOLLAR, _DOLLAR_MASK)
    spans = list(_MATH_SPAN.finditer(masked))
    if len(spans) < 2:
        return None
    between = _MATH_SPAN.sub(" ", masked).strip(" .'\"\\")
    if len(between) > _CONNECTOR_MAX_CHARS or _BOX_CONNECTOR.fullmatch(between) is None:
        return None
    contents = [next(g for g in span.groups() if g is not None) for span in spans]
    return ", ".join(_trim(content).replace(_DOLLAR_MASK, _ESCAPED_DOLLAR) for content in contents)


def last_math_expression(text: str) -> str | None:
    """The formula after the last prose word, else the last math span or stand-alone number (whichever ends last)."""
    tail = _formula_after_last_word(text)
    if tail is not None:
        return tail
    span = _last_math_span(text)
    number = None
    for m in _NUMBER.finditer(text):
        number = m
    if number is not None and (span is None or number.end() > span[1]):
        return number.group().replace(" ", "").replace("\t", "")
    return _trim(span[0]) if span is not None else None


def _formula_after_last_word(text: str) -> str | None:
    """What follows the last prose word, when it is one short formula (a digit or a LaTeX command in it)."""
    words = _prose_words(text)
    tail = _trim(text[words[-1].end() :] if words else text).strip(":,;'\" \t\n")
    tail = _trim(_strip_outer_delimiters(tail))
    if not tail or len(tail) > BARE_MAX_CHARS or tail[0] in "^_}$" or not _MATH_CONTENT.search(tail):
        return None
    if "$" in tail.replace("\\$", "") or "\\[" in tail or "\\]" in tail:  # several spans or a broken one
        return None
    return tail


def _trim(text: str) -> str:
    return text.strip().rstrip(".").strip()


def _strip_outer_delimiters(text: str) -> str:
    span = _first_math_span(text)
    if span is not None and not text[: span[2]].strip() and not text[span[1] :].strip(" .,"):
        return span[0]
    return text


def _first_math_span(text: str) -> tuple[str, int, int] | None:
    """(content, end, start) of the first `$..$`, `$$..$$`, `\\(..\\)` or `\\[..\\]` span."""
    best: tuple[str, int, int] | None = None
    masked = text.replace(_ESCAPED_DOLLAR, _DOLLAR_MASK)  # `\$5` is a price, not a delimiter
    for opener, closer in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        start = masked.find(opener)
        while start != -1 and opener == "$" and masked.startswith("$$", start):
            start = masked.find(opener, start + 2)
        if start == -1:
            continue
        close = masked.find(closer, start + len(opener))
        if close == -1 or (best is not None and start >= best[2]):
            continue
        content = text[start + len(opener) : close]
        if content.strip():
            best = (content, close + len(closer), start)
    return best


def _last_math_span(text: str) -> tuple[str, int] | None:
    """(content, end position) of the last `$..$`, `$$..$$`, `\\(..\\)` or `\\[..\\]` span; linear scans only."""
    best: tuple[str, int] | None = None
    masked = text.replace(_ESCAPED_DOLLAR, _DOLLAR_MASK)  # `\$5` is a price, not a delimiter
    dollar_parts = masked.replace("$$", "$").split("$")
    if len(dollar_parts) >= 3:
        # Odd segments lie between paired dollars; the last complete one is the last inline-math span.
        last_odd = len(dollar_parts) - 2 if len(dollar_parts) % 2 == 1 else len(dollar_parts) - 3
        content = dollar_parts[last_odd].replace(_DOLLAR_MASK, _ESCAPED_DOLLAR)
        end = masked.rfind("$") + 1 if len(dollar_parts) % 2 == 1 else _nth_dollar_end(masked, last_odd + 1)
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
    "all_boxes",
    "extract_answer",
    "extract_with_source",
    "has_prose",
    "is_bare_answer",
    "last_answer_line",
    "last_boxed",
    "last_math_expression",
]
