"""What one trace row may store: each of its three texts (the client's messages as JSON, the reply, the other
choices as JSON) is cut at `max_trace_chars` characters, and the full length of each text cut is recorded in
the row's `truncated` column, so no row is unbounded whatever the client sent or the upstream answered.

The messages and choices stay valid JSON when cut: their strings are shortened (the messages' in proportion
to their length), and the list is shortened only when its structure alone is over the cap. The prompt key
is computed from the messages as sent, so a cut row still pairs with its other arm.
"""

from __future__ import annotations

import json
from typing import Any

#: what a row says of a text it cut: {"messages" | "reply" | "replies": full length in characters}
Truncated = dict[str, int]


def dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def capped_messages(messages: list[Any], max_chars: int, truncated: Truncated) -> str:
    """The messages as JSON, at most about `max_chars` characters of it."""
    text = dump(messages)
    if len(text) <= max_chars:
        return text
    truncated["messages"] = len(text)
    total = _string_chars(messages)
    share = max_chars / 2 / total if total else 0.0  # half the cap to the strings, the rest to structure and quoting
    clipped = [_clip_strings(message, share) for message in messages]
    text = dump(clipped)
    while len(text) > max_chars and clipped:  # a structure too big on its own: the latest messages kept
        clipped = clipped[len(clipped) // 2 + 1 :] if len(clipped) > 1 else []
        text = dump(clipped)
    return text


def capped_replies(replies: list[str], lengths: list[int] | None, max_chars: int, truncated: Truncated) -> list[str]:
    """The choices to store: each cut to what is left of `max_chars` (choice 0 first), none once it is spent.
    `lengths`: each choice's full length when the texts given were already cut (a stream)."""
    if not replies:
        return []
    lengths = lengths or [len(text) for text in replies]
    kept: list[str] = []
    budget = max_chars
    for text in replies:
        if budget <= 0:
            break
        kept.append(text[:budget])
        budget -= len(kept[-1])
    if lengths[0] > len(kept[0]):
        truncated["reply"] = lengths[0]
    if len(replies) > 1 and (len(kept) < len(replies) or sum(map(len, kept)) < sum(lengths)):
        truncated["replies"] = sum(lengths)
        truncated["choices"] = len(replies)
    return kept


def _string_chars(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(_string_chars(item) for item in value.values())
    if isinstance(value, list):
        return sum(_string_chars(item) for item in value)
    return 0


def _clip_strings(value: Any, share: float) -> Any:
    """`value` with every string cut to `share` of its length (a string of 100 characters or fewer kept)."""
    if isinstance(value, str):
        return value if len(value) <= 100 else value[: max(100, int(len(value) * share))]
    if isinstance(value, dict):
        return {key: _clip_strings(item, share) for key, item in value.items()}
    if isinstance(value, list):
        return [_clip_strings(item, share) for item in value]
    return value
