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


def sse_texts(payload: bytes) -> tuple[list[str], dict[str, Any] | None]:
    """The streamed text of each choice (in index order) and the usage chunk, if the client asked for one."""
    pieces: dict[int, list[str]] = {}
    usage = None
    for line in payload.decode("utf-8", errors="replace").splitlines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        try:
            chunk = json.loads(data)
        except (ValueError, RecursionError):
            continue
        if not isinstance(chunk, dict):
            continue
        usage = chunk.get("usage") or usage
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            index, delta = choice.get("index", 0), choice.get("delta")
            text = delta.get("content") if isinstance(delta, dict) else None
            if isinstance(index, int):
                pieces.setdefault(index, []).append(text if isinstance(text, str) else "")
    return ["".join(pieces[index]) for index in sorted(pieces)], usage


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
