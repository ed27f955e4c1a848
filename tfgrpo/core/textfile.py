"""Reading user files as bounded, decoded text: one clear error (file, line, column) instead of a traceback.

read_text(path, error=LibraryFileError)            UTF-8 or a one-line error naming the first bad byte
loads_json(text, source=..., error=...)            JSON with a nesting-depth limit (no RecursionError)
strict_json_loads(text)                            json.loads refusing what it would accept silently or crash on
find_duplicate_json_key(text)                      (key, line) of a key given twice, for files read by others
iter_lines(path, error=DatasetError)               decoded lines of a JSONL file, each size-checked
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: largest file read as one text (a library, a reply); bigger is refused, not loaded into memory
MAX_FILE_BYTES = 64 * 1024 * 1024
#: longest line of a JSONL file (a dataset row, a sample to score): 1 MiB is ~250k tokens, past any context
#: window, so a longer row is a mistake to report, not a request to send
MAX_ROW_BYTES = 1024 * 1024
#: deepest JSON nesting accepted (a library is 3 deep; Python's parser overflows near 1,000)
MAX_JSON_DEPTH = 64


def read_text(path: str | Path, *, error: type[Exception], max_bytes: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of `path`; `error` (one line naming file, line and column) for bad bytes or size."""
    path = Path(path)
    size = path.stat().st_size
    if size > max_bytes:
        raise error(f"{path}: {size:,} bytes is larger than the limit of {max_bytes:,} bytes")
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise error(
            f"{path}: line {line}, column {column}: byte 0x{data[exc.start]:02x} is not valid UTF-8 "
            "(save the file as UTF-8)"
        ) from None


class JSONValueError(ValueError):
    """Valid JSON syntax whose value is refused; the message names the key, the caller adds file and line."""


class DuplicateKeyError(JSONValueError):
    """An object names a key twice; `find_duplicate_json_key` finds its line when the caller has a whole file."""

    def __init__(self, key: str) -> None:
        super().__init__(f"duplicate key {key!r} (a JSON object names each key once)")
        self.key = key


_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
#: a surrogate code point on its own: Python strings can hold one (from a JSON or YAML escape), UTF-8 cannot
LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def strict_json_loads(text: str) -> Any:
    """`json.loads`, refusing with `JSONValueError` what it would accept silently or crash on later: a key
    given twice (the last would win), an integer longer than Python converts (a ValueError with no line),
    and a lone surrogate escape such as `"\\ud800"` (a string no UTF-8 file, prompt or cache key can hold).
    Syntax errors stay `json.JSONDecodeError`, so each caller words them as before."""
    value = json.loads(text, object_pairs_hook=_refuse_duplicate_keys, parse_int=_bounded_int)
    if _ESCAPED_SURROGATE.search(text):  # cheap test first: a valid pair (an emoji) also matches
        where = _lone_surrogate_at(value)
        if where is not None:
            raise JSONValueError(
                f"{where} holds a lone surrogate escape (\\ud800-\\udfff): not a character; "
                "write the character itself or a valid pair"
            )
    return value


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for key, value in pairs:
        if key in row:
            raise DuplicateKeyError(key)
        row[key] = value
    return row


def _bounded_int(digits: str) -> int:
    limit = sys.get_int_max_str_digits()
    count = len(digits.lstrip("-"))
    if limit and count > limit:
        raise JSONValueError(
            f"a number of {count:,} digits is longer than the {limit:,} Python reads; write it as a string"
        )
    return int(digits)


def _lone_surrogate_at(value: Any) -> str | None:
    """Where the first string with a lone surrogate is ("key 'problem'", "the value"), or None."""
    stack: list[tuple[Any, str]] = [(value, "the value")]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str) and LONE_SURROGATE.search(item):
            return where
        if isinstance(item, dict):
            for key, child in item.items():
                if LONE_SURROGATE.search(key):
                    return f"a key ({key.encode('utf-8', 'backslashreplace').decode()})"
                stack.append((child, f"key {key!r}"))
        elif isinstance(item, list):
            stack.extend((child, where) for child in item)
    return None


def loads_json(text: str, *, source: str, error: type[Exception], max_depth: int = MAX_JSON_DEPTH) -> Any:
    """`strict_json_loads` with a nesting limit: `error` instead of a RecursionError or an absurdly deep value."""
    try:
        value = strict_json_loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{source}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except DuplicateKeyError as exc:
        key, line = find_duplicate_json_key(text) or (exc.key, None)
        where = f"{source}: line {line}" if line else source
        raise error(f"{where}: {DuplicateKeyError(key)}") from None
    except JSONValueError as exc:
        raise error(f"{source}: {exc}") from None
    except RecursionError:
        raise error(f"{source}: JSON nested too deeply to read; the limit is {max_depth} levels") from None
    depth = _depth(value)
    if depth > max_depth:
        raise error(f"{source}: JSON nested {depth} levels deep; the limit is {max_depth}")
    return value


_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DUPLICATE_CHECK = json.JSONDecoder(object_pairs_hook=_refuse_duplicate_keys)
_PLAIN = json.JSONDecoder()


def find_duplicate_json_key(text: str) -> tuple[str, int] | None:
    """(key, line) of the first key given twice in a JSON text: one value, or values one after another (JSON
    Lines). None when there is none, or when the text is not JSON (its reader reports that). For files read by
    a reader that keeps the last of two keys (Arrow's), and for a line number in a refusal."""
    index = _skip(text, 0)
    while index < len(text):
        try:
            _, end = _DUPLICATE_CHECK.raw_decode(text, index)
        except DuplicateKeyError as exc:
            try:
                key, offset = _locate_duplicate(text, index) or (exc.key, index)
            except RecursionError:  # nested deeper than a hand walk goes: the line where the value starts
                key, offset = exc.key, index
            return key, text.count("\n", 0, offset) + 1
        except (ValueError, RecursionError):  # bad syntax, a huge number, deep nesting: the reader words it
            return None
        index = _skip(text, end)
    return None


def _locate_duplicate(text: str, at: int) -> tuple[str, int] | None:
    """(key, offset) of the first key given again, in reading order, in the JSON value at `at`; walked by hand
    (slow, so only run once the fast check has found a duplicate, which makes the value valid JSON)."""
    at = _skip(text, at)
    if text[at] not in "[{":
        return None
    closing, seen = ("}" if text[at] == "{" else "]"), set()
    at = _skip(text, at + 1)
    while text[at] != closing:
        if closing == "}":
            key, after = _PLAIN.raw_decode(text, at)
            if key in seen:
                return key, at
            seen.add(key)
            at = _skip(text, _skip(text, after) + 1)  # past the ':'
        found = _locate_duplicate(text, at)
        if found:
            return found
        at = _skip(text, _PLAIN.raw_decode(text, at)[1])
        if text[at] == ",":
            at = _skip(text, at + 1)
    return None


def _skip(text: str, at: int) -> int:
    """The offset of the first non-whitespace character from `at`."""
    match = _WHITESPACE.match(text, at)
    return match.end() if match else at


def _depth(value: Any) -> int:
    """Nesting depth of a parsed JSON value, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in item.values())
        elif isinstance(item, list):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in item)
    return deepest


def iter_lines(
    path: str | Path, *, error: type[Exception], max_row_bytes: int = MAX_ROW_BYTES
) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line, streamed: a line over `max_row_bytes` or with bytes that are
    not UTF-8 raises `error` naming file, line (and column) without reading the rest into memory."""
    with Path(path).open("rb") as handle:
        for number, raw in enumerate(_bounded_lines(handle, max_row_bytes, path, error), start=1):
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise error(
                    f"{path}:{number}: column {exc.start + 1}: byte 0x{raw[exc.start]:02x} is not valid UTF-8 "
                    "(save the file as UTF-8)"
                ) from None


def _bounded_lines(handle: Any, max_row_bytes: int, path: str | Path, error: type[Exception]) -> Iterator[bytes]:
    number = 0
    while True:
        raw = handle.readline(max_row_bytes + 1)
        if not raw:
            return
        number += 1
        if len(raw) > max_row_bytes and not raw.endswith(b"\n"):
            raise error(f"{path}:{number}: row is longer than the limit of {max_row_bytes:,} bytes")
        yield raw


__all__ = [
    "MAX_FILE_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_ROW_BYTES",
    "DuplicateKeyError",
    "JSONValueError",
    "LONE_SURROGATE",
    "find_duplicate_json_key",
    "iter_lines",
    "loads_json",
    "read_text",
    "strict_json_loads",
]
