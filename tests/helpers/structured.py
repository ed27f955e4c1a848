"""Shared by the structured-output tests: stage replies, a completion body carrying one, a refusing server."""

from __future__ import annotations

import json

from tests.helpers.servers import Reply
from tfgrpo.llm.types import SamplingParams

GREEDY = SamplingParams(temperature=0.0, max_tokens=64)
VALID = json.dumps(
    {"reasoning": "Carries were missed.", "operations": [{"option": "add", "experience": "Check carries."}]}
)
PROSE = 'I think so.\n```json\n[{"option": "add", "experience": "Check carries."}]\n```'


def completion_carrying(text: str) -> dict:
    """A chat.completion body whose one choice is exactly `text`."""
    return {
        "id": "c",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10},
    }


def refusing(kinds: set[str]):
    """A server refusing response_format types in `kinds` with 400, answering prose + JSON otherwise."""

    def respond(body: dict) -> Reply:
        kind = (body.get("response_format") or {}).get("type")
        if kind in kinds:
            return Reply(
                status=400,
                body={
                    "error": {
                        "message": f"Unsupported parameter: response_format {kind}",
                        "type": "invalid_request_error",
                    }
                },
            )
        return Reply(body=completion_carrying(VALID if kind == "json_object" else PROSE))

    return respond
