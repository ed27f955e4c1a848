"""The JSON schema of every structured reply the engine parses, generated from the pydantic models of
`tfgrpo.experiences.ops`, and the reply-format text the prompt templates show: one source for both.

A stage-2/3 reply is one object, reasoning first (models think better before they commit):

    {"reasoning": "...", "operations": [{"option": "add", "experience": "..."}, ...]}

The schema carries the limits the engine enforces: at most K operations, only the options that can
apply (modify/delete/merge need an existing id, so an empty library allows only `add`), ids as an enum
of the library's ids, and a length bound on lesson texts. Backends that enforce it (response_format,
a grammar, a logits processor) then cannot produce a reply the tolerant parser has to repair; the
parser stays as the second line for backends that cannot.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from tfgrpo.experiences.ops import OPTIONS, AddOp, DeleteOp, MergeOp, ModifyOp

OPERATIONS_SCHEMA_NAME = "library_operations"
#: Upper bound on a lesson's characters for a lesson of `max_words` words (grammars count characters, the
#: parser counts words). English averages ~5.7 characters per word with its space, so at 5 a lesson that
#: fills its bound still has at most `max_words` words unless its words average under 4 letters; at 8, a
#: run-on of short words ("the answer to the original question ...") passed the grammar with 47 words
#: and was then refused by the word limit (a lost reply). A word-count `pattern` cannot replace this:
#: xgrammar ignores maxLength when a pattern is given, and the bound on characters keeps the reply
#: inside the stage's token budget.
CHARS_PER_WORD = 5
#: The free-text reasoning before the operations; bounded so a rambling model still closes the object.
REASONING_MAX_CHARS = 200
#: Token-budget arithmetic at the worst case, one token per character: SmolLM2 spells "1.1.1.1." a token
#: per digit and per dot, and at 3 characters per token such loops overran the budget and were cut off
#: mid-lesson (lost replies). Every ASCII token holds at least one character, so the bound below holds.
CHARS_PER_TOKEN = 1
OP_OVERHEAD_CHARS = 48  # '{"option": "modify", "id": "G12", "experience": ""}, ' and the like
#: The shortest lesson bound the schema shrinks to; a budget that cannot hold K lessons this long gets a
#: smaller maxItems instead (a reply cut off mid-lesson loses every lesson in it).
MIN_LESSON_CHARS = 32
#: The shortest lesson a constrained reply may hold: the templates ask for "a few words naming the situation
#: it applies to" first, so "1.0" is not a lesson (SmolLM2 proposed exactly that). Only the schema says so:
#: the parser keeps accepting short lessons from backends that cannot enforce a schema.
MIN_LESSON_REPLY_CHARS = 12
FIRST_WORD_CHARS = 16  # "Understanding" has 13 letters; a longer first "word" is not one

_MODELS: dict[str, type[BaseModel]] = {"add": AddOp, "modify": ModifyOp, "delete": DeleteOp, "merge": MergeOp}
_NEEDS_IDS = {"modify", "delete", "merge"}
_NEEDS_TWO_IDS = {"merge"}  # a merge names two or more different experiences


def allowed_options(ids: Sequence[str]) -> tuple[str, ...]:
    """The options that can apply to a library with these ids: none but `add` when it is empty, no
    `merge` with a single experience (SmolLM2 merged ["G0", "G0"] and lost the reply)."""
    distinct = len(set(ids))
    return tuple(
        option
        for option in OPTIONS
        if (distinct or option not in _NEEDS_IDS) and (distinct >= 2 or option not in _NEEDS_TWO_IDS)
    )


def operations_schema(
    *,
    max_ops: int | None = None,
    min_ops: int = 0,
    ids: Sequence[str] = (),
    max_words: int | None = None,
    max_tokens: int | None = None,
) -> dict[str, Any]:
    """`_operations_schema`, a fresh copy per call. Every group analysis of a step asks for the same schema
    (same library ids): it is built once (~0.4 ms, most of it copying pydantic's operation schemas) and read
    back from its JSON (~20 us)."""
    result: dict[str, Any] = json.loads(_operations_schema_json(max_ops, min_ops, tuple(ids), max_words, max_tokens))
    return result


@functools.lru_cache(maxsize=16)
def _operations_schema_json(
    max_ops: int | None, min_ops: int, ids: tuple[str, ...], max_words: int | None, max_tokens: int | None
) -> str:
    return json.dumps(
        _operations_schema(max_ops=max_ops, min_ops=min_ops, ids=ids, max_words=max_words, max_tokens=max_tokens)
    )


def _operations_schema(
    *, max_ops: int | None, min_ops: int, ids: Sequence[str], max_words: int | None, max_tokens: int | None
) -> dict[str, Any]:
    """JSON schema of a stage-2/3 reply (strict-mode compatible: every property required, no extras).

    `min_ops` > 0 requires that many operations (consolidation when a proposed lesson is new to the library).

    With `max_tokens`, the string bounds are shrunk so that a reply filling every string to its bound
    still closes within the token budget, even at one token per character: a constrained reply is then
    never cut off mid-object. When K lessons of MIN_LESSON_CHARS do not fit, maxItems is lowered to what
    fits (at least one).
    """
    max_chars = max_words * CHARS_PER_WORD if max_words else None
    reasoning_chars = REASONING_MAX_CHARS
    if max_tokens is not None:
        budget = max_tokens * CHARS_PER_TOKEN - OP_OVERHEAD_CHARS
        reasoning_chars = max(0, min(REASONING_MAX_CHARS, budget // 6))
        room = budget - reasoning_chars
        fits = max(1, room // (MIN_LESSON_CHARS + OP_OVERHEAD_CHARS))
        max_ops = fits if max_ops is None else min(max_ops, fits)
        per_lesson = max(MIN_LESSON_REPLY_CHARS, room // max_ops - OP_OVERHEAD_CHARS)
        max_chars = min(max_chars, per_lesson) if max_chars else per_lesson
    items = [_operation_schema(option, ids=list(ids), max_chars=max_chars) for option in allowed_options(ids)]
    operations: dict[str, Any] = {"type": "array", "items": items[0] if len(items) == 1 else {"anyOf": items}}
    if max_ops is not None:
        operations["maxItems"] = max_ops
    if min_ops:
        operations["minItems"] = min_ops if max_ops is None else min(min_ops, max_ops)
    return {
        "type": "object",
        "properties": {
            "reasoning": {"type": "string", "maxLength": reasoning_chars},
            "operations": operations,
        },
        "required": ["reasoning", "operations"],
        "additionalProperties": False,
    }


@functools.cache
def _generated_schema(option: str) -> dict[str, Any]:
    """pydantic's schema of one operation model: ~1 ms to generate, asked for by every group and
    consolidation call, so generated once per process (the models never change)."""
    return _MODELS[option].model_json_schema()


def _operation_schema(option: str, *, ids: list[str], max_chars: int | None) -> dict[str, Any]:
    generated = copy.deepcopy(_generated_schema(option))  # a copy: what is built from it may be changed
    properties: dict[str, Any] = {}
    for name, spec in generated["properties"].items():
        spec = {key: value for key, value in spec.items() if key not in ("title", "default", "const")}
        if name == "option":
            spec = {"type": "string", "enum": [option]}
        elif name == "id":
            spec = {**spec, "enum": ids}
        elif name == "ids":
            spec = {"type": "array", "items": {"type": "string", "enum": ids}, "minItems": 2}
        elif name == "experience":
            min_chars = min(MIN_LESSON_REPLY_CHARS, max_chars or MIN_LESSON_REPLY_CHARS)
            spec = {**spec, "minLength": min_chars, "pattern": lesson_pattern(min_chars, max_chars)}
            if max_chars:
                spec["maxLength"] = max_chars
        properties[name] = spec
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def lesson_pattern(min_chars: int, max_chars: int | None) -> str:
    """A lesson as a grammar sees it: a first word of letters, a space, then no `<`/`>` (the prompt's
    placeholder is `<text of the new lesson>`), no line break and no `"` or backslash (llama.cpp emits a
    pattern's characters raw inside the JSON string: a quote there ends the string and breaks the reply),
    ending as a sentence ends. The length bounds are part of the pattern (xgrammar ignores maxLength next to
    one). The rest of the rule (mostly letters) is checked at apply (`tfgrpo.experiences.model.sentence_problem`)."""
    rest_min = max(0, min_chars - FIRST_WORD_CHARS - 2)
    rest_max = "" if max_chars is None else str(max(rest_min, max_chars - FIRST_WORD_CHARS - 2))
    return f'^[A-Za-z]{{1,{FIRST_WORD_CHARS}}} [^<>"\\\\\\n]{{{rest_min},{rest_max}}}[.!?]$'


def reply_format(*, max_ops: int, ids: Sequence[str] = ()) -> str:
    """What the prompt shows as the reply format, derived from the same models as the schema."""
    lines = [f"  {json.dumps(_example(option), ensure_ascii=False)}" for option in allowed_options(ids)]
    return (
        '{\n"reasoning": "<your reasoning, a few sentences>",\n"operations": [\n'
        + ",\n".join(lines)
        + f"\n]\n}}\n(at most {max_ops} operations)"
    )


def _example(option: str) -> dict[str, Any]:
    example: dict[str, Any] = {}
    for name, field in _MODELS[option].model_fields.items():
        if name == "option":
            example[name] = option
        elif name == "ids":
            example[name] = ["G1", "G4"]
        elif name == "id":
            example[name] = "G3"
        else:
            example[name] = f"<{(field.description or name).rstrip('.').lower()}>"
    return example


__all__ = [
    "OPERATIONS_SCHEMA_NAME",
    "allowed_options",
    "lesson_pattern",
    "operations_schema",
    "reply_format",
]
