"""One chat request as the proxy sees it: validated, assigned an arm, the library injected, then traced.

The library goes in as a system message of its own, placed FIRST; the client's messages follow
unchanged (its own system message included), so the client's instructions come after, and win over,
the general lessons. Arm A (holdout) and `x-tfgrpo-inject: none` forward the client's messages as they are.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from experiences import Injection
from experiences.errors import ExperienceError
from tfgrpo.serve.arms import LIBRARY, assign_arm
from tfgrpo.serve.live_library import LiveLibrary

ROLES = {"system", "developer", "user", "assistant", "tool", "function"}


class BadRequest(ValueError):
    """The client's request cannot be served; the message goes back with a 400."""


@dataclass
class Exchange:
    id: str
    body: dict[str, Any]  # what goes upstream (library injected)
    client_messages: list[Any]
    arm: str
    library_version: int
    injected_ids: list[str]
    stream: bool
    started: float = field(default_factory=time.perf_counter)

    def upstream_bytes(self) -> bytes:
        return json.dumps(self.body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")

    def headers(self) -> dict[str, str]:
        return {
            "x-tfgrpo-arm": self.arm,
            "x-tfgrpo-library-version": str(self.library_version),
            "x-tfgrpo-exchange-id": self.id,
        }

    def trace_row(
        self, *, status: int, reply: str | None, usage: dict[str, Any] | None, upstream: str | None
    ) -> dict[str, Any]:
        usage = usage if isinstance(usage, dict) else {}
        return {
            "id": self.id,
            "created_at": time.time(),
            "model": str(self.body.get("model")),
            "upstream": upstream,
            "arm": self.arm,
            "library_version": self.library_version,
            "injected_ids": json.dumps(self.injected_ids),
            "prompt_key": prompt_key(self.client_messages),
            "messages": json.dumps(self.client_messages, ensure_ascii=False),
            "reply": reply,
            "status": status,
            "stream": self.stream,
            "latency_ms": (time.perf_counter() - self.started) * 1000.0,
            "prompt_tokens": _int_or_none(usage.get("prompt_tokens")),
            "completion_tokens": _int_or_none(usage.get("completion_tokens")),
        }


def parse_body(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list of {role, content} objects")
    for position, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise BadRequest(f"messages[{position}] must be an object with a 'role' of {sorted(ROLES)}")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise BadRequest("'stream' must be true or false")
    return body


def prepare(
    body: dict[str, Any],
    *,
    live: LiveLibrary,
    holdout: float,
    arm_key: str | None,
    inject: str | None,
    default_inject: str,
    model: str | None,
) -> Exchange:
    """Arm, injection and the upstream body for one validated request (`inject`: the per-request header)."""
    try:
        injection = _injection(inject or default_inject)
    except ExperienceError as exc:
        raise BadRequest(f"x-tfgrpo-inject: {exc}") from None
    user = body.get("user")
    arm = assign_arm(arm_key or (user if isinstance(user, str) else None), holdout)
    snapshot = live.current  # this request's version, whatever reloads happen meanwhile
    client_messages = body["messages"]
    injected: list[str] = []
    upstream_body = dict(body)
    if model:
        upstream_body["model"] = model
    if arm == LIBRARY and injection.mode != "none":
        system, chosen = live.system_message(snapshot, injection, last_user_text(client_messages))
        if system:
            upstream_body["messages"] = [{"role": "system", "content": system}, *client_messages]
            injected = [e.id for e in chosen]
    return Exchange(
        id=os.urandom(16).hex(),  # as random as uuid4().hex, without building a UUID object per request
        body=upstream_body,
        client_messages=client_messages,
        arm=arm,
        library_version=snapshot.version,
        injected_ids=injected,
        stream=bool(body.get("stream")),
    )


@lru_cache(maxsize=64)
def _injection(spec: str) -> Injection:
    return Injection.parse(spec)  # a pydantic model per request costs more than the rest of `prepare`


def last_user_text(messages: list[dict[str, Any]]) -> str:
    """The text of the last user message (content parts joined): the query topk injection searches with."""
    for message in reversed(messages):
        if message.get("role") == "user":
            return content_text(message.get("content"))
    return ""


def content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part.get("text", "") for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def prompt_key(messages: list[Any]) -> str:
    """Same client messages, same key: what pairs an exchange of arm A with one of arm B."""
    return hashlib.sha256(json.dumps(messages, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def reply_from_json(payload: bytes) -> tuple[str | None, dict[str, Any] | None]:
    """(text of the first choice, usage) of a chat.completion body; (None, None) when it is not one."""
    try:
        data = json.loads(payload)
        message = data["choices"][0]["message"]
        return content_text(message.get("content")), data.get("usage")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None, None


def reply_from_sse(payload: bytes) -> tuple[str | None, dict[str, Any] | None]:
    """The streamed text of choice 0 and the usage chunk (if the client asked for one) of an SSE body."""
    pieces: list[str] = []
    usage = None
    for line in payload.decode("utf-8", errors="replace").splitlines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        try:
            chunk = json.loads(data)
        except ValueError:
            continue
        if isinstance(chunk, dict):
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") if isinstance(choice, dict) else None
                if isinstance(delta, dict) and choice.get("index", 0) == 0 and isinstance(delta.get("content"), str):
                    pieces.append(delta["content"])
    return "".join(pieces), usage


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) else None
