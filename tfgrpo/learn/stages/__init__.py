"""The three learning stages of Training-Free GRPO, one module each.

1. `summarize`: each rollout of a kept group → a step-by-step summary (what was done, which experiences
   were used, where it went wrong).
2. `advantage`: each kept group → the group's semantic advantage as operations on the library.
3. `consolidate`: all operations proposed for a batch → one final operation list, applied to the library.

Stages 2 and 3 ask for operations; `request_operations` is how: one call carrying the reply's JSON
schema (`tfgrpo.experiences.schemas`: enforced by the backend where it can), the tolerant parser of
`experiences`, and exactly one retry with the parser's feedback when the reply was malformed. Every
request is deterministic (same messages, schema, sample 0), so a resumed run finds every answer in the cache.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tfgrpo.experiences.model import Library
from tfgrpo.experiences.ops import Operation, Rejection
from tfgrpo.experiences.parse import parse_operations
from tfgrpo.experiences.schemas import OPERATIONS_SCHEMA_NAME, operations_schema
from tfgrpo.llm.client import LLMClient
from tfgrpo.llm.errors import PER_REQUEST_FAILURES
from tfgrpo.llm.types import ResponseSchema, SamplingParams
from tfgrpo.prompts import load_template
from tfgrpo.rollout.sampling import gather_all


@dataclass
class OpsReply:
    """The operations one stage-2/3 request produced, and everything needed to audit it."""

    operations: list[Operation] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    attempts: list[dict[str, Any]] = field(default_factory=list)  # {"reply", "feedback"} per call
    retried: bool = False
    malformed: bool = False  # still not a clean list of operations after the retry
    error: str | None = None  # the call itself failed (after the client's retries)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    enforced: bool = False  # the first reply was generated under the JSON schema
    strict: bool = False  # the first reply was exactly valid JSON, used as it came (no repair, no retry)

    @property
    def lost(self) -> bool:
        """Nothing usable came back: the call failed, or the reply was still unusable after the retry."""
        return self.error is not None or (self.malformed and not self.operations)

    def to_row(self) -> dict[str, Any]:
        return {
            "operations": [op.to_wire() for op in self.operations],
            "rejected": [{"item": _jsonable(r.item), "reason": r.reason} for r in self.rejected],
            "attempts": self.attempts,
            "retried": self.retried,
            "malformed": self.malformed,
            "enforced": self.enforced,
            "strict": self.strict,
            "error": self.error,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }


async def request_operations(
    client: LLMClient,
    messages: list[dict[str, str]],
    *,
    library: Library,
    sampling: SamplingParams,
    tag: str,
    max_words: int,
    max_ops: int | None = None,
    min_ops: int = 0,
) -> OpsReply:
    """Ask for operations; on a malformed reply, retry once with the parser's feedback.

    Valid items of the first reply are kept; the retry is asked to correct only the rejected ones, so
    the final list is the first reply's valid items plus the retry's (or, when the first reply held no
    JSON at all, the retry's).
    """
    out = OpsReply()
    schema = operations_response_schema(
        library, max_ops=max_ops, min_ops=min_ops, max_words=max_words, max_tokens=sampling.max_tokens
    )
    reply = await _ask(client, messages, sampling=sampling, tag=tag, out=out, schema=schema)
    if reply is None:
        return out
    first = parse_operations(reply, library, max_words=max_words)
    out.attempts.append({"reply": reply, "feedback": first.feedback() or None})
    if first.ok:
        out.operations = list(first.operations)
        out.strict = _is_strict_json(reply)
        return out

    out.retried = True
    retry_messages = [
        *messages,
        {"role": "assistant", "content": reply},
        {"role": "user", "content": first.feedback()},
    ]
    second_reply = await _ask(client, retry_messages, sampling=sampling, tag=tag, out=out, schema=schema)
    if second_reply is None:  # the retry's call failed: keep what the first reply got right
        out.operations, out.rejected, out.malformed = list(first.operations), list(first.rejected), True
        return out
    second = parse_operations(second_reply, library, max_words=max_words)
    out.attempts.append({"reply": second_reply, "feedback": second.feedback() or None})
    kept_from_first = list(first.operations) if first.found else []
    out.operations = kept_from_first + list(second.operations)
    out.rejected = list(second.rejected) if (second.found or not first.found) else list(first.rejected)
    out.malformed = not second.ok
    return out


def operations_response_schema(
    library: Library, *, max_ops: int | None, max_words: int, max_tokens: int | None = None, min_ops: int = 0
) -> ResponseSchema:
    """The schema of a stage-2/3 reply for this library (its ids are the only ones that may be named),
    with string bounds that fit `max_tokens`."""
    schema = operations_schema(
        max_ops=max_ops, min_ops=min_ops, ids=library.ids, max_words=max_words, max_tokens=max_tokens
    )
    return ResponseSchema(name=OPERATIONS_SCHEMA_NAME, schema=schema)


async def _ask(
    client: LLMClient,
    messages: list[dict[str, str]],
    *,
    sampling: SamplingParams,
    tag: str,
    out: OpsReply,
    schema: ResponseSchema,
) -> str | None:
    try:
        (completion,) = await client.chat(messages, sampling=sampling, tag=tag, response_schema=schema)
    except PER_REQUEST_FAILURES as exc:
        out.error = f"{type(exc).__name__}: {exc}"
        return None
    if not out.attempts:
        out.enforced = completion.schema_enforced
    out.prompt_tokens += completion.usage.prompt_tokens
    out.completion_tokens += completion.usage.completion_tokens
    return completion.text


def _is_strict_json(reply: str) -> bool:
    try:
        json.loads(reply)
    except ValueError:
        return False
    return True


def render_stage_prompt(name_or_path: str, **variables: Any) -> str:
    """Render a stage template (compiled once and cached by `load_template`; an edited file recompiles)."""
    return load_template(name_or_path).render(**variables).strip()


def _jsonable(item: Any) -> Any:
    if hasattr(item, "model_dump"):
        return item.model_dump(mode="json")
    return item


__all__ = ["OpsReply", "gather_all", "operations_response_schema", "render_stage_prompt", "request_operations"]
