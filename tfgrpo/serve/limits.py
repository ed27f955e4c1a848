"""Bounds on what a client can make the proxy hold or parse, checked before any route runs.

uvicorn bounds none of these itself (with httptools, a 50 MB header is accepted, and a request that
announces a body and never sends it holds its connection forever), so the app does: the request line and
headers once complete (`tfgrpo serve` also bounds them while they arrive: `http_protocol.py`), the body's
size and the time it may take to arrive, the nesting depth of JSON bodies (Python's parser recurses:
100,000 nested brackets are a RecursionError), and what JSON may hold (no NaN or infinities, no lone
surrogates). Each limit answers a 4xx
OpenAI-style error; 408 and 413 also close the connection, whose unread body cannot be skipped safely.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from typing import Any

from tfgrpo.serve.errors import RequestRejected

CLOSE = {"connection": "close"}
#: a \uD800-\uDFFF escape: half of a surrogate pair, or a lone surrogate (not text)
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_timeout = getattr(asyncio, "timeout", None)


def check_head(scope: dict[str, Any], max_bytes: int) -> None:
    """431 when the request line (path and query) and headers add up to more than `max_bytes`."""
    size = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
    for name, value in scope["headers"]:
        size += len(name) + len(value)
    if size > max_bytes:
        raise RequestRejected(
            431, f"request line and headers over {max_bytes} bytes (max_header_bytes)", "headers_too_large"
        )


async def read_body(receive: Any, max_bytes: int, timeout_s: float, *, setting: str) -> bytes:
    """The request body, refused as soon as it passes `max_bytes` (never buffered whole; `setting` names the
    option that set it) or when it has not all arrived within `timeout_s` (a client that stalls)."""
    try:
        if _timeout is None:  # Python 3.10
            return await asyncio.wait_for(_read(receive, max_bytes, setting), timeout_s)
        async with _timeout(timeout_s):  # 3.11+: without the task wait_for creates per request
            return await _read(receive, max_bytes, setting)
    except asyncio.TimeoutError:
        raise RequestRejected(
            408, f"request body not received within {timeout_s:g}s (body_timeout_s)", "body_timeout", headers=CLOSE
        ) from None


async def _read(receive: Any, max_bytes: int, setting: str) -> bytes:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > max_bytes:
            message = f"request body over {max_bytes} bytes ({setting})"
            raise RequestRejected(413, message, "request_too_large", headers=CLOSE)
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def replay(body: bytes) -> Any:
    """A `receive` that hands the already-read body over once, then reports a disconnect."""
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}

    return receive


def load_json(raw: bytes, max_depth: int, *, what: str = "request body") -> Any:
    """The parsed body; 400 `invalid_json` or `json_too_deep` (over `max_depth` nested arrays/objects)."""
    try:
        value = json.loads(raw, parse_constant=_not_a_number(what), parse_float=_finite_float(what))
    except RecursionError:
        raise _too_deep(what, max_depth) from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError alike
        raise RequestRejected(400, f"{what} is not valid JSON: {exc}", "invalid_json") from None
    # Each nesting level needs one bracket: a body with few brackets cannot be deep, whatever its size.
    if raw.count(b"[") + raw.count(b"{") > max_depth and _depth_over(value, max_depth):
        raise _too_deep(what, max_depth)
    if SURROGATE_ESCAPE.search(raw):
        _refuse_lone_surrogates(value, what)
    return value


def _not_a_number(what: str) -> Any:
    def refuse(constant: str) -> float:  # json's NaN, Infinity, -Infinity: not JSON, and not a sampling value
        raise RequestRejected(400, f"{what} holds {constant}, which is not a JSON number", "invalid_number")

    return refuse


def _finite_float(what: str) -> Any:
    def parse(text: str) -> float:
        value = float(text)
        if math.isinf(value):  # 1e400: a finite literal that is an infinity once read
            raise RequestRejected(400, f"{what} holds {text[:40]}, out of a double's range", "invalid_number")
        return value

    return parse


def _refuse_lone_surrogates(value: Any, what: str) -> None:
    """400 for a string with a lone surrogate (`"\\ud800"`): valid JSON, but no text, so not encodable."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        message = f"{what} holds a lone UTF-16 surrogate escape (\\uD800-\\uDFFF without its pair), which is not text"
        raise RequestRejected(400, message, "invalid_text") from None


def _depth_over(value: Any, max_depth: int) -> bool:
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > max_depth:
            return True
        pending.extend((child, depth + 1) for child in children)
    return False


def _too_deep(what: str, max_depth: int) -> RequestRejected:
    return RequestRejected(
        400, f"{what} nests arrays/objects deeper than {max_depth} levels (max_json_depth)", "json_too_deep"
    )
