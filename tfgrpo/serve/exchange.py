"""One chat request as the proxy sees it: validated, assigned an arm, the library injected, then traced.

The library goes in as a system message of its own, placed FIRST; the client's messages follow
unchanged (its own system message included), so the client's instructions come after, and win over,
the general lessons. Arm A (holdout) and `x-tfgrpo-inject: none` forward the client's messages as they are.

Assignment and treatment are recorded apart: `arm` is the arm the request was ASSIGNED; `injected_ids`
(with the library's content hash) is what it was actually GIVEN. A request of arm B sent with
`x-tfgrpo-inject: none`, or whose topk injection selected nothing, is assigned B and untreated.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from tfgrpo.experiences import Injection
from tfgrpo.experiences.errors import ExperienceError
from tfgrpo.serve.arms import CHALLENGER, CONTROL, PINNED, assign_arm, sticky_key
from tfgrpo.serve.errors import RequestRejected
from tfgrpo.serve.limits import load_json
from tfgrpo.serve.live_deployment import Served
from tfgrpo.serve.live_library import LiveLibrary, Snapshot
from tfgrpo.serve.replies import content_text
from tfgrpo.serve.sampling import check_sampling
from tfgrpo.serve.trace_caps import Truncated, capped_messages, capped_replies

ROLES = {"system", "developer", "user", "assistant", "tool", "function"}


class BadRequest(RequestRejected):
    """The client's request cannot be served; the message goes back with a 400."""

    def __init__(self, message: str, code: str = "invalid_request"):
        super().__init__(400, message, code)


@dataclass
class Exchange:
    id: str
    body: dict[str, Any]  # what goes upstream (library injected)
    client_messages: list[Any]
    arm: str  # assigned
    library_version: int  # the file's `version` field
    library_hash: str  # the content hash of the library in use: what identifies the version served
    injection: str  # the injection asked for (the header's, else the server's default)
    injected_ids: list[str]  # what was actually given: empty = untreated
    stream: bool
    owner: str | None = None  # the client key's identity (sha256 hex) that made it; None in open mode
    started: float = field(default_factory=time.perf_counter)

    def upstream_bytes(self) -> bytes:
        return json.dumps(self.body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")

    def headers(self) -> dict[str, str]:
        return {
            "x-tfgrpo-arm": self.arm,
            "x-tfgrpo-library-version": str(self.library_version),
            "x-tfgrpo-library-hash": self.library_hash,
            "x-tfgrpo-exchange-id": self.id,
        }

    def trace_row(
        self,
        *,
        status: int,
        replies: list[str] | None,
        usage: dict[str, Any] | None,
        upstream: str | None,
        error: str | None = None,
        max_chars: int,
        lengths: list[int] | None = None,
    ) -> dict[str, Any]:
        """`replies`: the text of every choice (None: no reply); `error`: the code of a failed exchange;
        `max_chars`: the cap on each stored text (`trace_caps`); `lengths`: each choice's full length, when
        `replies` were cut already (a stream)."""
        usage = usage if isinstance(usage, dict) else {}
        truncated: Truncated = {}
        messages = capped_messages(self.client_messages, max_chars, truncated)
        replies = capped_replies(replies, lengths, max_chars, truncated) if replies is not None else None
        return {
            "id": self.id,
            "created_at": time.time(),
            "model": str(self.body.get("model")),
            "upstream": upstream,
            "arm": self.arm,
            "owner": self.owner,
            "library_version": self.library_version,
            "library_hash": self.library_hash,
            "injection": self.injection,
            "injected_ids": json.dumps(self.injected_ids),
            "prompt_key": prompt_key(self.client_messages),
            "messages": messages,
            "reply": replies[0] if replies else None,
            # the other choices of `n` > 1 (a single reply is not stored twice)
            "replies": json.dumps(replies, ensure_ascii=False) if replies and len(replies) > 1 else None,
            "status": status,
            "error": error,
            "stream": self.stream,
            "latency_ms": (time.perf_counter() - self.started) * 1000.0,
            "prompt_tokens": _int_or_none(usage.get("prompt_tokens")),
            "completion_tokens": _int_or_none(usage.get("completion_tokens")),
            "truncated": json.dumps(truncated) if truncated else None,
        }


def parse_body(raw: bytes, *, max_json_depth: int, max_choices: int) -> dict[str, Any]:
    body = load_json(raw, max_json_depth)
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
    check_sampling(body, max_choices=max_choices)
    return body


def prepare(
    body: dict[str, Any],
    *,
    live: LiveLibrary,
    holdout: float,
    arm_header: str | None,
    identity: str | None = None,
    admin: bool = False,
    inject: str | None,
    default_inject: str,
    model: str | None,
    served: Served | None = None,
    challenger_share: float = 0.0,
    pinned: Snapshot | None = None,
) -> Exchange:
    """Arm, injection and the upstream body for one validated request (`inject`: the per-request header;
    `identity`: the client key's, which owns the exchange; `admin`: that key may name users for the arm;
    `served`: the deployment in use (champion, challenger), None when the library file alone serves;
    `pinned`: the version an admin pinned the request to)."""
    try:
        injection = _injection(inject or default_inject)
    except ExperienceError as exc:
        raise BadRequest(f"x-tfgrpo-inject: {exc}") from None
    key = sticky_key(identity=identity, admin=admin, header=arm_header, body_user=body.get("user"))
    arm, snapshot = _arm_and_version(key, holdout, live, served, challenger_share, pinned)
    client_messages = body["messages"]
    injected: list[str] = []
    upstream_body = dict(body)
    if model:
        upstream_body["model"] = model
    if arm != CONTROL and injection.mode != "none":
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
        library_hash=snapshot.content_hash,
        injection=str(injection),
        injected_ids=injected,
        stream=bool(body.get("stream")),
        owner=identity,
    )


def _arm_and_version(
    key: str | None,
    holdout: float,
    live: LiveLibrary,
    served: Served | None,
    challenger_share: float,
    pinned: Snapshot | None,
) -> tuple[str, Snapshot]:
    """The arm and the version it serves, read once: this request's, whatever swaps happen meanwhile."""
    if pinned is not None:
        return PINNED, pinned
    if served is None:
        return assign_arm(key, holdout), live.current
    challenger = served.challenger
    arm = assign_arm(
        key,
        holdout,
        challenger=None if challenger is None else challenger.content_hash,
        challenger_share=challenger_share,
    )
    return arm, challenger if arm == CHALLENGER and challenger is not None else served.champion


@lru_cache(maxsize=64)
def _injection(spec: str) -> Injection:
    return Injection.parse(spec)  # a pydantic model per request costs more than the rest of `prepare`


def last_user_text(messages: list[dict[str, Any]]) -> str:
    """The text of the last user message (content parts joined): the query topk injection searches with."""
    for message in reversed(messages):
        if message.get("role") == "user":
            return content_text(message.get("content"))
    return ""


def prompt_key(messages: list[Any]) -> str:
    """Same client messages, same key: what pairs an exchange of arm A with one of arm B."""
    return hashlib.sha256(json.dumps(messages, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) else None
