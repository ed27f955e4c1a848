"""The tolerant parser: raw LLM reply -> validated operations + rejected items with reasons.

It never raises on a reply. It finds the JSON (```json fences or bare, amid prose or after <think>
blocks; comments, trailing commas, single quotes, one object instead of a list), maps the reference
implementation's aliases (`operation`, `ADD/UPDATE/DELETE/NONE`, `content`, `modified_from`,
`merged_from`) onto the wire format, and validates each item on its own: an item is either a complete,
valid operation or a rejection with a reason, never half of one. `ParseResult.feedback()` is the text
to send back to the LLM for one retry (templates/feedback.jinja).

Which JSON counts when a reply holds several: fenced blocks win over bare JSON, and the last value
that looks like operations wins (models draft, then correct themselves). A list cut off by the end of
the reply keeps its complete items; its last item is rejected as incomplete.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, Field

from tfgrpo.experiences import jsonscan
from tfgrpo.experiences.limits import DEFAULT_MAX_WORDS  # re-exported: callers import them from here
from tfgrpo.experiences.model import MAX_EXPERIENCE_CHARS, Library, count_words
from tfgrpo.experiences.ops import OPTIONS, AddOp, DeleteOp, MergeOp, ModifyOp, Operation, Rejection
from tfgrpo.experiences.render import bundled_template

OPTION_KEYS = ("option", "operation", "op", "action", "type")
TEXT_KEYS = ("experience", "content", "text", "new_experience", "lesson", "insight")
ID_KEYS = ("id", "modified_from", "target", "target_id", "experience_id")
IDS_KEYS = ("ids", "merged_from", "merge_ids", "source_ids", "sources")
WRAPPER_KEYS = ("operations", "ops", "updates", "changes", "actions", "edits")
OPTION_ALIASES = {
    **{name: "add" for name in ("add", "insert", "create", "new", "append")},
    **{name: "modify" for name in ("modify", "update", "edit", "revise", "rewrite", "replace", "change")},
    **{name: "delete" for name in ("delete", "remove", "drop", "del")},
    **{name: "merge" for name in ("merge", "combine", "consolidate")},
    **{name: "none" for name in ("none", "noop", "no-op", "no_op", "keep", "skip", "no_change", "nothing")},
}


class ParseResult(BaseModel):
    """What a reply said: valid operations, rejected items (with reasons), and no-ops skipped."""

    operations: list[Operation] = Field(default_factory=list)
    rejected: list[Rejection] = Field(default_factory=list)
    skipped: int = Field(0, description="Explicit no-op items (NONE / keep).")
    found: bool = Field(False, description="Whether a JSON list or object of operations was found at all.")
    truncated: bool = Field(False, description="Whether the reply was cut off inside the JSON or a <think> block.")

    @property
    def ok(self) -> bool:
        return self.found and not self.rejected

    def feedback(self) -> str:
        """Text for one retry: what was wrong, item by item, and the expected format. '' when all is well."""
        if self.ok:
            return ""
        total = len(self.operations) + len(self.rejected) + self.skipped
        return _feedback_template().render(
            found=self.found, truncated=self.truncated, rejections=self.rejected, total=total, options=OPTIONS
        )


@lru_cache(maxsize=1)
def _feedback_template():  # -> jinja2.Template; compiled on the first retry, then reused
    import jinja2

    environment = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False)
    return environment.from_string(bundled_template("feedback.jinja"))


@dataclass(frozen=True)
class _Candidate:
    items: list[Any]
    fenced: bool
    closed: bool
    start: int
    end: int


def parse_operations(
    reply: str, library: Library | None = None, *, max_words: int | None = DEFAULT_MAX_WORDS
) -> ParseResult:
    """Parse a raw LLM reply. With `library`, ids are checked (and loosely matched: '[g3]', 3 -> 'G3')."""
    if not isinstance(reply, str):
        return ParseResult(rejected=[Rejection(reason=f"reply is not text (got {type(reply).__name__})")])
    text, cut_in_reasoning = jsonscan.strip_reasoning(reply)
    candidate = _choose(_candidates(text))
    if candidate is None:
        return ParseResult(truncated=cut_in_reasoning)
    result = ParseResult(found=True, truncated=not candidate.closed)
    for index, raw in enumerate(candidate.items):
        if not candidate.closed and index == len(candidate.items) - 1:
            result.rejected.append(
                Rejection(reason="incomplete: the reply was cut off inside this item", item=raw, index=index)
            )
            continue
        outcome = normalize_item(raw, library, max_words=max_words)
        if outcome is None:
            result.skipped += 1
        elif isinstance(outcome, str):
            result.rejected.append(Rejection(reason=outcome, item=raw, index=index))
        else:
            result.operations.append(outcome)
    return result


# -- finding the operations ---------------------------------------------------------------------------
def _candidates(text: str) -> list[_Candidate]:
    found: list[_Candidate] = []
    for block in jsonscan.fenced_blocks(text):
        found += _candidates_in(block, fenced=True)
    return found + _candidates_in(text, fenced=False)


def _candidates_in(text: str, *, fenced: bool) -> list[_Candidate]:
    found: list[_Candidate] = []
    for region in jsonscan.find_regions(text):
        items = _operation_items(region.value())
        if items is not None:
            found.append(_Candidate(items, fenced, region.closed, region.start, region.end))
    # Every region cut off by the end of the text runs to that end, so they nest: only the outermost
    # counts. It competes with the closed regions inside it: keep whichever holds more items
    # ("[0, 1) and then [...]" in prose vs a genuinely truncated list).
    cut_off = next((c for c in found if not c.closed), None)
    closed = [c for c in found if c.closed]
    if cut_off is None:
        return closed
    inside = [c for c in closed if c.start > cut_off.start]
    if inside and _count_operations(cut_off.items) <= max(_count_operations(c.items) for c in inside):
        return closed
    return [c for c in closed if c.start < cut_off.start] + [cut_off]


def _count_operations(items: list[Any]) -> int:
    return sum(1 for item in items if isinstance(item, dict) and _looks_like_operation(item))


def _choose(candidates: list[_Candidate]) -> _Candidate | None:
    if not candidates:
        return None
    fenced = [c for c in candidates if c.fenced]
    pool = fenced or candidates
    non_empty = [c for c in pool if c.items]
    return (non_empty or pool)[-1]


def _operation_items(value: Any, depth: int = 0) -> list[Any] | None:
    """The list of operation items a JSON value holds, or None if it does not look like operations."""
    if depth > 4:
        return None
    if isinstance(value, list):
        if not value:
            return []
        if any(isinstance(item, dict) and _looks_like_operation(item) for item in value):
            return value
        for item in value:  # e.g. [[...ops...]]
            inner = _operation_items(item, depth + 1) if isinstance(item, (list, dict)) else None
            if inner:
                return inner
        return None
    if isinstance(value, dict):
        if _looks_like_operation(value):
            return [value]
        lowered = {str(k).lower(): v for k, v in value.items()}
        for key in WRAPPER_KEYS:
            if isinstance(lowered.get(key), list):
                return _operation_items(lowered[key], depth + 1) or lowered[key]
        for inner_value in value.values():
            if isinstance(inner_value, (list, dict)):
                inner = _operation_items(inner_value, depth + 1)
                if inner:
                    return inner
    return None


def _looks_like_operation(item: dict[str, Any]) -> bool:
    keys = {str(k).strip().lower() for k in item}
    return bool(keys & set(OPTION_KEYS)) and bool(
        keys & set(TEXT_KEYS + ID_KEYS + IDS_KEYS) or _option_of(item) is not None
    )


# -- one item -----------------------------------------------------------------------------------------
def normalize_item(
    raw: Any, library: Library | None, *, max_words: int | None = DEFAULT_MAX_WORDS
) -> Operation | str | None:
    """An operation, a rejection reason (str), or None for an explicit no-op."""
    if not isinstance(raw, dict):
        return 'expected an object like {"option": "add", "experience": "..."}'
    fields = {str(k).strip().lower(): v for k, v in raw.items()}
    option_value = _first(fields, OPTION_KEYS)
    if option_value is None:
        return f"missing 'option' (one of {', '.join(OPTIONS)})"
    option = _option_of(raw)
    if option == "none":
        return None
    if option is None:
        return f"unknown option {option_value!r}; use one of {', '.join(OPTIONS)}"
    ids_value = _first(fields, IDS_KEYS)
    id_value = _first(fields, ID_KEYS)
    if option == "modify" and isinstance(ids_value, list) and len(ids_value) > 1:
        option = "merge"  # the reference's UPDATE with merged_from is a merge
    if option == "merge" and ids_value is None and isinstance(id_value, list):
        ids_value = id_value

    text = None
    if option in ("add", "modify", "merge"):
        text = _first(fields, TEXT_KEYS)
        problem = _check_text(text, max_words)
        if problem:
            return problem
        text = " ".join(str(text).split())
    if option == "add":
        return AddOp(experience=text)
    if option in ("modify", "delete"):
        if isinstance(id_value, list) and len(id_value) == 1:
            id_value = id_value[0]
        if id_value is None or isinstance(id_value, (list, dict)) or not str(id_value).strip():
            return f"'{option}' needs the 'id' of an existing experience"
        experience_id = _resolve_id(id_value, library)
        if library is not None and experience_id not in library:
            return _unknown_id(experience_id, library)
        return ModifyOp(id=experience_id, experience=text) if option == "modify" else DeleteOp(id=experience_id)
    # merge
    if not isinstance(ids_value, list) or any(isinstance(v, (list, dict)) for v in ids_value):
        return "'merge' needs 'ids': a list of two or more existing ids"
    ids = list(dict.fromkeys(_resolve_id(v, library) for v in ids_value if str(v).strip()))
    if len(ids) < 2:
        return f"'merge' needs two or more different ids (got {ids})"
    if library is not None:
        for experience_id in ids:
            if experience_id not in library:
                return _unknown_id(experience_id, library)
    return MergeOp(ids=tuple(ids), experience=text)


def _option_of(item: dict[str, Any]) -> str | None:
    fields = {str(k).strip().lower(): v for k, v in item.items()}
    value = _first(fields, OPTION_KEYS)
    if value is None:
        return None
    if not isinstance(value, str):
        return "none" if value is False else None
    return OPTION_ALIASES.get(value.strip().lower().replace(" ", "_"))


def _first(fields: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if fields.get(key) is not None:
            return fields[key]
    return None


def _check_text(text: Any, max_words: int | None) -> str | None:
    if text is None:
        return "missing 'experience' text"
    if not isinstance(text, str):
        return f"'experience' must be a string (got {type(text).__name__})"
    if not text.strip():
        return "empty experience text"
    chars = len(" ".join(text.split()))
    if chars > MAX_EXPERIENCE_CHARS:  # refused here, as a rejected item, not by the library in the middle of a run
        return f"text has {chars:,} characters; the limit is {MAX_EXPERIENCE_CHARS:,}"
    words = count_words(text)
    if max_words is not None and words > max_words:
        return f"text has {words} words; the limit is {max_words}"
    return None


def _resolve_id(value: Any, library: Library | None) -> str:
    text = str(value).strip().strip("[](){}<>.,:;'\"` ").strip()
    if library is None or text in library:
        return text
    by_fold = {experience_id.casefold(): experience_id for experience_id in library.ids}
    if text.casefold() in by_fold:
        return by_fold[text.casefold()]
    if text.isdigit() and f"{library.id_prefix}{int(text)}" in library:
        return f"{library.id_prefix}{int(text)}"
    return text


def _unknown_id(experience_id: str, library: Library) -> str:
    shown = ", ".join(library.ids[:20]) + (" ..." if len(library) > 20 else "")
    return f"unknown id {experience_id!r} (existing ids: {shown or 'none, the library is empty'})"


def describe_operations(operations: list[Operation]) -> str:
    return json.dumps([op.to_wire() for op in operations], ensure_ascii=False)


__all__ = ["DEFAULT_MAX_WORDS", "ParseResult", "describe_operations", "normalize_item", "parse_operations"]
