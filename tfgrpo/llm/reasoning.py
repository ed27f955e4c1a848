"""Where a reply's reasoning lives, and how it is kept apart from the answer.

Providers return a reasoning model's thinking in one of three places (each documented by the provider):

- a message field `reasoning_content`: DeepSeek's `deepseek-reasoner`, vLLM's reasoning parsers (up to
  0.9), llama.cpp's server with `--reasoning-format deepseek`, litellm's normalised replies (Anthropic);
- a message field `reasoning`: OpenRouter, and vLLM's parsers from 0.10 on;
- a `<think>...</think>` block at the head of the content: open models served without a parser
  (DeepSeek-R1 distills, Qwen3, SmolLM3); a reply may also start mid-thought, with only `</think>`,
  when the chat template opened the block itself.

OpenAI's reasoning models return no reasoning text at all, only `completion_tokens_details.reasoning_tokens`.
The answer (what rewards grade) is always the content with any think block removed.
"""

from __future__ import annotations

import re
from typing import Any

#: message fields that carry reasoning text, in the order they are read
REASONING_FIELDS = ("reasoning_content", "reasoning")
_THINK = re.compile(r"^\s*<think>(.*?)</think>\s*", re.DOTALL)
_OPENED_BY_TEMPLATE = re.compile(r"^(.*?)</think>\s*", re.DOTALL)


def split_think_block(content: str) -> tuple[str | None, str]:
    """(reasoning, answer) of a content that may open with a think block; (None, content) when it does not."""
    match = _THINK.match(content)
    if match is None and "<think>" not in content:
        match = _OPENED_BY_TEMPLATE.match(content)
    if match is None:
        return None, content
    return match.group(1).strip() or None, content[match.end() :]


def reasoning_of(
    message: Any,
    content: str,
    read: Any,
    *,
    fields: tuple[str, ...] = REASONING_FIELDS,
    think_in_content: bool = True,
) -> tuple[str | None, str]:
    """(reasoning text, answer) of one reply message; `read(container, name)` reads a field of it.

    `fields` and `think_in_content` are where the provider's profile says reasoning lives: a provider whose
    reasoning never comes back in the content (OpenAI, DeepSeek's API) keeps a literal `<think>` in its answer."""
    values = [read(message, name) for name in fields]
    texts = [value for value in values if isinstance(value, str) and value.strip()]
    think, answer = split_think_block(content) if think_in_content else (None, content)
    parts = [*texts[:1], *([think] if think else [])]
    return ("\n\n".join(parts) if parts else None), answer


def reasoning_tokens(usage: Any, read: Any) -> int:
    """`completion_tokens_details.reasoning_tokens` of a usage object or dict (0 when absent)."""
    value = read(read(usage, "completion_tokens_details"), "reasoning_tokens")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


__all__ = ["REASONING_FIELDS", "reasoning_of", "reasoning_tokens", "split_think_block"]
