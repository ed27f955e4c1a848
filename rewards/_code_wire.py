"""The data that crosses between the code reward's two sandboxed processes: plain values only, never code.

The test harness (trusted: it runs the row's tests) and the candidate (untrusted: it runs the completion's
program) talk over two pipes in lines of JSON. A value is encoded as JSON with tags for what JSON lacks:

    {"$tuple": [...]}, {"$set": [...]}, {"$frozenset": [...]}, {"$dict": [[key, value], ...]},
    {"$bytes": "<base64>"}, {"$complex": [real, imag]}, {"$ref": n} (an object left in the candidate),
    {"$module": "name"} (a module the candidate imported, e.g. `math`)

Decoding builds only builtin types (subclasses become their base), so a comparison made on a decoded
value runs the interpreter's own code, never the candidate's. This file is imported by path inside the
sandboxes (it has no import of the project).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

#: deepest nesting a decoded value may have (a hostile reply must not exhaust the harness's stack)
MAX_DEPTH = 64
#: longest line either side reads (bytes)
MAX_LINE_BYTES = 32 * 1024 * 1024


class WireError(ValueError):
    """A value that cannot cross (a function, an open file) or a malformed line."""


def encode(value: Any, make_ref: Callable[[Any], int] | None = None, depth: int = 0) -> Any:
    """`value` as JSON-ready data; objects that are not plain data become refs via `make_ref`, else fail."""
    if depth > MAX_DEPTH:
        raise WireError(f"a value nested deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, (bool, str)):
        return str(value) if isinstance(value, str) and type(value) is not str else value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    nested = depth + 1
    if isinstance(value, list):
        return [encode(item, make_ref, nested) for item in value]
    if isinstance(value, tuple):
        return {"$tuple": [encode(item, make_ref, nested) for item in value]}
    if isinstance(value, frozenset):
        return {"$frozenset": [encode(item, make_ref, nested) for item in value]}
    if isinstance(value, set):
        return {"$set": [encode(item, make_ref, nested) for item in value]}
    if isinstance(value, dict):
        return {"$dict": [[encode(k, make_ref, nested), encode(v, make_ref, nested)] for k, v in value.items()]}
    if isinstance(value, (bytes, bytearray)):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, complex):
        return {"$complex": [value.real, value.imag]}
    if type(value).__name__ == "module":
        return {"$module": str(value.__name__)}
    if make_ref is None:
        raise WireError(f"a value of type {type(value).__name__} cannot cross the sandbox")
    return {"$ref": make_ref(value)}


_TAGS = ("$tuple", "$set", "$frozenset", "$dict", "$bytes", "$complex", "$ref", "$module")


def decode(data: Any, resolve: Callable[[str, Any], Any], depth: int = 0) -> Any:
    """Builtin values from `encode`'s output; `resolve(tag, payload)` gives what "$ref"/"$module" stand for."""
    if depth > MAX_DEPTH:
        raise WireError(f"a value nested deeper than {MAX_DEPTH} levels")
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    nested = depth + 1
    if isinstance(data, list):
        return [decode(item, resolve, nested) for item in data]
    if not isinstance(data, dict) or len(data) != 1:
        raise WireError("a malformed value")
    [(tag, payload)] = data.items()
    if tag not in _TAGS:
        raise WireError(f"an unknown tag {tag[:40]!r}")
    if tag in ("$ref", "$module"):
        return resolve(tag, payload)
    if tag == "$bytes":
        return base64.b64decode(_expect(payload, str), validate=True)
    if tag == "$complex":
        real, imag = _expect(payload, list)
        return complex(_expect(real, (int, float)), _expect(imag, (int, float)))
    items = [decode(item, resolve, nested) for item in _expect(payload, list)]
    try:
        if tag == "$tuple":
            return tuple(items)
        if tag == "$set":
            return set(items)
        if tag == "$frozenset":
            return frozenset(items)
        if any(not isinstance(pair, list) or len(pair) != 2 for pair in items):
            raise WireError("a malformed dict")
        return dict(items)
    except TypeError as exc:  # an unhashable key or member
        raise WireError(f"a malformed value: {exc}") from None


def _expect(value: Any, kind: type | tuple[type, ...]) -> Any:
    if not isinstance(value, kind) or isinstance(value, bool):
        raise WireError("a malformed value")
    return value


def send(stream: Any, message: dict[str, Any]) -> None:
    stream.write(json.dumps(message, separators=(",", ":")).encode("utf-8") + b"\n")
    stream.flush()


def receive(stream: Any) -> dict[str, Any]:
    """One message; EOF, an over-long line or a line that is not a JSON object is a `WireError`."""
    line = stream.readline(MAX_LINE_BYTES + 1)
    if not line:
        raise WireError("the candidate's process ended")
    if len(line) > MAX_LINE_BYTES:
        raise WireError("a reply longer than the limit")
    try:
        message = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise WireError("a reply that is not JSON") from exc
    if not isinstance(message, dict):
        raise WireError("a reply that is not a JSON object")
    return message
