"""Chat replies in their two wire forms: the text of every choice out of a `chat.completion` object or an SSE
stream (what a trace records), and a whole completion written out as a finished SSE stream (what a client
that asked for `stream: true` gets when the reply came whole: an `llm:` upstream, or an HTTP upstream
that ignored `stream`)."""

from __future__ import annotations

import json
from typing import Any


def choice_texts(data: dict[str, Any]) -> list[str]:
    """The text of each choice of a chat.completion, in index order ('' for a choice without text)."""
    choices = [choice for choice in data.get("choices") or [] if isinstance(choice, dict)]
    choices.sort(key=_index)
    return [content_text((choice.get("message") or {}).get("content")) for choice in choices]


def _index(choice: dict[str, Any]) -> int:
    index = choice.get("index")
    return index if isinstance(index, int) else 0


def content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part.get("text", "") for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


class StreamText:
    """The text of each choice of an SSE stream (and its usage chunk), fed chunk by chunk as it is passed on.

    Holds at most `max_chars` of each choice's text (its full length still counted), so tracing a stream
    costs a bounded amount of memory however long it runs; a single line longer than `max_line_bytes` (no
    newline yet) is skipped rather than buffered."""

    def __init__(self, max_chars: int, *, max_line_bytes: int | None = None):
        self.max_chars = max_chars
        self.max_line_bytes = max_line_bytes or 4 * max_chars + 65536
        self.usage: dict[str, Any] | None = None
        self.done = False  # `data: [DONE]` seen
        self._pieces: dict[int, list[str]] = {}
        self._kept: dict[int, int] = {}
        self._lengths: dict[int, int] = {}
        self._partial: list[bytes] = []  # the line not ended yet, as it came
        self._partial_bytes = 0
        self._skipping = False  # inside a line over max_line_bytes: dropped up to its newline

    def feed(self, chunk: bytes) -> None:
        while chunk and not self.done:
            end = chunk.find(b"\n")
            if end < 0:
                self._hold(chunk)
                return
            self._hold(chunk[:end])
            if not self._skipping:
                self._line(b"".join(self._partial))
            self._partial, self._partial_bytes, self._skipping = [], 0, False
            chunk = chunk[end + 1 :]

    def texts(self) -> list[str]:
        """Each choice's text (at most `max_chars` of it), in index order."""
        return ["".join(self._pieces[index]) for index in sorted(self._pieces)]

    def lengths(self) -> list[int]:
        """Each choice's full length in characters, in index order."""
        return [self._lengths[index] for index in sorted(self._pieces)]

    def _hold(self, part: bytes) -> None:
        if self._skipping:
            return
        self._partial_bytes += len(part)
        if self._partial_bytes > self.max_line_bytes:
            self._partial, self._skipping = [], True
        else:
            self._partial.append(part)

    def _line(self, raw: bytes) -> None:
        line = raw.decode("utf-8", errors="replace").rstrip("\r")
        if not line.startswith("data:"):
            return
        data = line[5:].strip()
        if data == "[DONE]":
            self.done = True
            return
        try:
            chunk = json.loads(data)
        except (ValueError, RecursionError):
            return
        if not isinstance(chunk, dict):
            return
        self.usage = chunk.get("usage") or self.usage
        for choice in chunk.get("choices") or []:
            if isinstance(choice, dict):
                self._add(choice.get("index", 0), choice.get("delta"))

    def _add(self, index: Any, delta: Any) -> None:
        if not isinstance(index, int):
            return
        text = delta.get("content") if isinstance(delta, dict) else None
        text = text if isinstance(text, str) else ""
        pieces = self._pieces.setdefault(index, [])
        kept = self._kept.get(index, 0)
        if kept < self.max_chars:
            pieces.append(text[: self.max_chars - kept])
            self._kept[index] = kept + len(pieces[-1])
        self._lengths[index] = self._lengths.get(index, 0) + len(text)


def sse_from_completion(data: dict[str, Any], *, include_usage: bool) -> bytes:
    """A chat.completion as a finished stream: one content chunk per choice, the finish chunks, the usage
    chunk when `include_usage`, then `[DONE]`."""
    head: dict[str, Any] = {"id": data.get("id"), "object": "chat.completion.chunk"}
    head |= {key: data[key] for key in ("created", "model", "system_fingerprint") if key in data}
    choices = [choice for choice in data.get("choices") or [] if isinstance(choice, dict)]
    events = []
    for position, choice in enumerate(choices):
        index = choice.get("index", position)
        delta = dict(choice.get("message") or {})
        if isinstance(delta.get("tool_calls"), list):
            calls = enumerate(delta["tool_calls"])
            delta["tool_calls"] = [call | {"index": i} if isinstance(call, dict) else call for i, call in calls]
        events.append(head | {"choices": [{"index": index, "delta": delta, "finish_reason": None}]})
    for position, choice in enumerate(choices):
        finish = {"index": choice.get("index", position), "delta": {}, "finish_reason": choice.get("finish_reason")}
        events.append(head | {"choices": [finish]})
    if include_usage and data.get("usage") is not None:
        events.append(head | {"choices": [], "usage": data["usage"]})
    lines = [f"data: {json.dumps(event, ensure_ascii=False)}\n\n" for event in events]
    return ("".join(lines) + "data: [DONE]\n\n").encode("utf-8")


def wants_usage(body: dict[str, Any]) -> bool:
    """Did a stream request ask for the usage chunk (`stream_options.include_usage`)?"""
    options = body.get("stream_options")
    return isinstance(options, dict) and bool(options.get("include_usage"))
