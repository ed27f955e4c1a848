"""The judge's verdict: one pydantic model is the source of its JSON schema, of the reply format the judge
prompt shows, and of the parser that reads the reply.

A verdict reply is one object, justification first (a model grades better after it has said why):

    {"reasoning": "The response's final answer, 12, equals the reference.", "verdict": "CORRECT"}

Backends that enforce the schema (response_format, a grammar, a logits processor) return exactly that;
for the others `parse_verdict_reply` is the tolerant second line: JSON in fences or prose, repaired JSON
(json_repair), a lower-case verdict, or the older `VERDICT: CORRECT` line of custom templates.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

import json_repair
from pydantic import BaseModel, ConfigDict, Field, ValidationError

VERDICT_SCHEMA_NAME = "judge_verdict"
#: outcome of one judged completion, as counted in the stage-reply counters (see `count_outcome`)
REPLY_COUNTS = ("replies", "enforced", "parsed", "repaired", "retried", "lost")
RETRY_FEEDBACK = (
    "Your reply could not be read as a verdict ({problem}). Reply again with only this JSON object:\n{reply_format}"
)


class JudgeVerdict(BaseModel):
    """What the judge answers about one response."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    reasoning: str = Field(
        max_length=300,
        description="One short sentence: why the response's final answer does or does not match the reference.",
    )
    verdict: Literal["CORRECT", "INCORRECT"] = Field(
        description="CORRECT when the final answer means the same as the reference, else INCORRECT."
    )

    @property
    def correct(self) -> bool:
        return self.verdict == "CORRECT"


def verdict_schema() -> dict[str, Any]:
    """JSON schema of a verdict reply, from `JudgeVerdict` (strict-mode compatible: all required, no extras)."""
    generated = JudgeVerdict.model_json_schema()
    properties = {
        name: {key: value for key, value in spec.items() if key != "title"}
        for name, spec in generated["properties"].items()
    }
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def reply_format() -> str:
    """The reply format the judge prompt shows, rendered from the fields of `JudgeVerdict`."""
    parts = []
    for name, field in JudgeVerdict.model_fields.items():
        choices = getattr(field.annotation, "__args__", None)
        if choices and all(isinstance(choice, str) for choice in choices):
            value = " or ".join(json.dumps(choice) for choice in choices)
        else:
            value = json.dumps(f"<{(field.description or name).rstrip('.')}>")
        parts.append(f"{json.dumps(name)}: {value}")
    return "{" + ", ".join(parts) + "}"


@dataclass(frozen=True)
class VerdictParse:
    """One reply read: the verdict (None when there is none), whether it was exact JSON, and why not."""

    verdict: JudgeVerdict | None
    strict: bool = False
    problem: str = ""


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)
_OBJECT = re.compile(r"\{.*\}", re.DOTALL)
_VERDICT_LINE = re.compile(r"verdict\s*[:=]\s*\**\s*(correct|incorrect)\b", re.IGNORECASE)


def parse_verdict_reply(reply: str) -> VerdictParse:
    """Exact JSON first (strict); then the tolerant reading; `verdict=None` with the problem otherwise."""
    text = (reply or "").strip()
    try:
        return VerdictParse(JudgeVerdict.model_validate_json(text), strict=True)
    except ValidationError:
        pass
    for candidate in [*_FENCE.findall(text), *_OBJECT.findall(text)]:
        verdict = _lenient_object(candidate)
        if verdict is not None:
            return VerdictParse(verdict)
    found = _VERDICT_LINE.findall(text)
    if found:  # custom templates written for the older line format
        return VerdictParse(JudgeVerdict(reasoning=text.splitlines()[0][:300], verdict=found[-1].upper()))
    problem = "no JSON object with a verdict" if text else "an empty reply"
    return VerdictParse(None, problem=problem)


def _lenient_object(text: str) -> JudgeVerdict | None:
    try:
        value = json_repair.loads(text)
    except (ValueError, RecursionError):  # json_repair gives up on some inputs
        return None
    if not isinstance(value, dict) or not isinstance(value.get("verdict"), str):
        return None
    fields = {
        "reasoning": str(value.get("reasoning") or "")[:300],
        "verdict": value["verdict"].strip().upper(),
    }
    try:
        return JudgeVerdict.model_validate(fields)
    except ValidationError:
        return None


def parse_verdict(reply: str) -> bool | None:
    """True/False from a judge reply (JSON verdict or a `VERDICT:` line); None when it has none."""
    verdict = parse_verdict_reply(reply).verdict
    return None if verdict is None else verdict.correct


def retry_feedback(problem: str) -> str:
    return RETRY_FEEDBACK.format(problem=problem, reply_format=reply_format())


def count_outcome(*, enforced: bool, first: VerdictParse, retried: bool, final: VerdictParse) -> dict[str, int]:
    """One judged completion as counter increments: the same meanings as the learn stages' counters."""
    return {
        "replies": 1,
        "enforced": int(enforced),
        "parsed": int(first.strict),
        "repaired": int(first.verdict is not None and not first.strict),
        "retried": int(retried),
        "lost": int(final.verdict is None),
    }


__all__ = [
    "REPLY_COUNTS",
    "VERDICT_SCHEMA_NAME",
    "JudgeVerdict",
    "VerdictParse",
    "count_outcome",
    "parse_verdict",
    "parse_verdict_reply",
    "reply_format",
    "retry_feedback",
    "verdict_schema",
]
