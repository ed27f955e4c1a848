"""Find JSON values in free text (LLM replies) and load them leniently.

The scanner walks from an opening bracket to its matching close, string-aware, and rewrites the region
into strict JSON on the way: `//`, `/* */` and `#` comments dropped, single-quoted strings turned into
double-quoted ones (a quote ends a string only before `, } ] :`, so apostrophes survive), raw newlines
in strings escaped, trailing commas removed. What is still broken (missing commas, unescaped quotes, a
reply cut off mid-list) goes to `json_repair`, a maintained repair library.
"""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass
from typing import Any

_FENCE = re.compile(r"(```|~~~)[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:\1|\Z)", re.DOTALL)
_THINK_TAG = re.compile(r"<(/?)(think|thinking|reasoning)>", re.IGNORECASE)
_THINK_OPEN = re.compile(r"<(think|thinking|reasoning)>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</(think|thinking|reasoning)>", re.IGNORECASE)
_MAX_REGION_STARTS = 200  # bounds the work on pathological replies ("[[[[[...")
# Characters the scans of one text may read past the first: 200 starts that each run to the end of a 1 MiB
# reply would read 200 MiB (minutes); a reply of operations is a few KB, so this never cuts a real one short.
_MAX_RESCAN_CHARS = 2_000_000
# A list of operations nests 3 or 4 deep; json_repair recurses on deeper input until it gives up, ~0.1 ms a
# level, so a region nested deeper than this that strict JSON cannot read is not repaired.
MAX_REPAIR_DEPTH = 64


@dataclass(frozen=True)
class Region:
    """A bracketed region of the text, cleaned into (hopefully) strict JSON."""

    start: int
    end: int
    json_text: str
    closed: bool  # False: the text ended inside the region (reply cut off)
    depth: int = 0  # deepest nesting of brackets inside it

    def value(self) -> Any:
        """The region loaded leniently; a region too deep to be a list of operations is only read strictly."""
        return load_lenient(self.json_text, repair=self.depth <= MAX_REPAIR_DEPTH)


def strip_reasoning(text: str) -> tuple[str, bool]:
    """Drop <think>...</think> blocks. Returns (text, cut_off_in_reasoning)."""
    text = _drop_think_blocks(text)
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:  # a template put <think> in the prompt: only what follows the last close is the answer
        text = text[closes[-1].end() :]
    opened = _THINK_OPEN.search(text)
    if opened:  # never closed: the reply was cut off while still reasoning
        return text[: opened.start()], True
    return text, False


def _drop_think_blocks(text: str) -> str:
    """`<think>.*?</think>` blocks (any of the three names) replaced by a space, as `re.sub` would, found
    from the tags' positions: the regex reads from each unclosed opening to the end (quadratic)."""
    tags = list(_THINK_TAG.finditer(text))
    closes: dict[str, list[int]] = {}
    for tag in tags:
        if tag.group(1):
            closes.setdefault(tag.group(2).lower(), []).append(tag.start())
    pieces, kept_from = [], 0
    for tag in tags:
        if tag.group(1) or tag.start() < kept_from:
            continue
        ends = closes.get(tag.group(2).lower(), [])
        at = bisect.bisect_left(ends, tag.end())
        if at < len(ends):
            close = ends[at]
            pieces += [text[kept_from : tag.start()], " "]
            kept_from = close + len(tag.group(2)) + 3  # `</name>`
    return "".join(pieces) + text[kept_from:]


def fenced_blocks(text: str) -> list[str]:
    """Contents of ``` / ~~~ fenced blocks in order (an unclosed last fence runs to the end)."""
    return [match.group(3) for match in _FENCE.finditer(text)]


def find_regions(text: str) -> list[Region]:
    """Top-level bracketed regions in order. A region that runs off the end is followed by the closed
    regions found inside it, so prose like "[0, 1) ... [{...}]" still yields the real list."""
    regions: list[Region] = []
    position, starts, cut_off, rescanned = 0, 0, False, 0
    while starts < _MAX_REGION_STARTS and rescanned <= _MAX_RESCAN_CHARS:
        start = _next_open(text, position)
        if start < 0:
            break
        starts += 1
        region, stop = _scan(text, start)
        rescanned += (stop - start) if starts > 1 else 0
        if region is None:  # mismatched brackets: not JSON from here, try the next opening
            position = start + 1
            continue
        # Every later region cut off by the end nests inside the first one, which holds all they hold: kept,
        # each would be loaded (json_repair) in vain, 200 times over on a reply of "{{{{..." (minutes).
        if region.closed or not cut_off:
            regions.append(region)
        cut_off = cut_off or not region.closed
        position = region.end if region.closed else start + 1
    return regions


def load_lenient(json_text: str, *, repair: bool = True) -> Any:
    """Strict JSON first; otherwise (with `repair`) json_repair's best effort. Returns None for nothing usable."""
    try:
        return json.loads(json_text)
    except (json.JSONDecodeError, RecursionError):  # RecursionError: absurdly deep nesting
        pass
    if not repair:
        return None
    import json_repair  # only for replies strict JSON cannot read: kept off learn's path to its first request

    try:
        value = json_repair.loads(json_text)
    except (ValueError, RecursionError):  # json_repair gives up on some inputs
        return None
    return None if value == "" else value


def _next_open(text: str, position: int) -> int:
    hits = [i for i in (text.find("[", position), text.find("{", position)) if i >= 0]
    return min(hits) if hits else -1


def scan_region(text: str, start: int) -> Region | None:
    """The region opened at `start`, or None where a close bracket does not match its opening."""
    return _scan(text, start)[0]


def _scan(text: str, start: int) -> tuple[Region | None, int]:
    """(the region opened at `start` or None, the index where the scan stopped)."""
    out: list[str] = []
    stack: list[str] = []
    last_comma = -1  # index in `out` of a comma that would be trailing if a close follows
    previous = ""  # last significant character emitted
    depth = 0
    i, n = start, len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            j, piece = _read_double_quoted(text, i)
            out.append(piece)
            previous, i = '"', j
            continue
        if ch == "'" and previous in ("[", "{", ",", ":"):
            j, piece = _read_single_quoted(text, i)
            out.append(piece)
            previous, i = '"', j
            continue
        if ch == "/" and text.startswith("//", i) or ch == "#":
            newline = text.find("\n", i)
            i = n if newline < 0 else newline
            continue
        if ch == "/" and text.startswith("/*", i):
            close = text.find("*/", i + 2)
            i = n if close < 0 else close + 2
            continue
        if ch in "[{":
            stack.append("]" if ch == "[" else "}")
            depth = max(depth, len(stack))
        elif ch in "]}":
            if ch != stack[-1]:
                return None, i
            stack.pop()
            if previous == "," and last_comma >= 0:
                out[last_comma] = ""
        if ch == ",":
            last_comma = len(out)
        if not ch.isspace():
            previous = ch
        out.append(ch)
        i += 1
        if not stack:
            return Region(start, i, "".join(out), closed=True, depth=depth), i
    return Region(start, n, "".join(out), closed=False, depth=depth), n


def _read_double_quoted(text: str, i: int) -> tuple[int, str]:
    j, n = i + 1, len(text)
    pieces = ['"']
    while j < n:
        ch = text[j]
        if ch == "\\" and j + 1 < n:
            pieces.append(text[j : j + 2])
            j += 2
            continue
        if ch == '"':
            pieces.append('"')
            return j + 1, "".join(pieces)
        pieces.append("\\n" if ch == "\n" else "\\t" if ch == "\t" else ch)
        j += 1
    return n, "".join(pieces)  # unterminated: json_repair will close it


def _read_single_quoted(text: str, i: int) -> tuple[int, str]:
    j, n = i + 1, len(text)
    pieces = ['"']
    while j < n:
        ch = text[j]
        if ch == "\\" and j + 1 < n:
            nxt = text[j + 1]
            pieces.append("'" if nxt == "'" else text[j : j + 2])
            j += 2
            continue
        if ch == "'":
            k = j + 1
            while k < n and text[k] in " \t\r\n":
                k += 1
            if k >= n or text[k] in ",}]:":
                pieces.append('"')
                return j + 1, "".join(pieces)
        pieces.append('\\"' if ch == '"' else "\\n" if ch == "\n" else "\\t" if ch == "\t" else ch)
        j += 1
    return n, "".join(pieces)
