"""Per-sample token usage: a request's usage shared over its `n` samples so that the sum is exact."""

from __future__ import annotations

from typing import Any

from tfgrpo.llm.types import Usage


def split_evenly(total: int, parts: int) -> list[int]:
    """`total` split into `parts` integers that differ by at most one and sum to `total`."""
    if parts <= 0:
        return []
    base, extra = divmod(max(total, 0), parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def share_usage(
    prompt_tokens: int,
    completion_tokens: list[int] | int,
    parts: int,
    cached_prompt_tokens: int = 0,
    reasoning_tokens: int = 0,
) -> list[Usage]:
    """Usage of each of `parts` samples.

    The prompt is billed once per request, so each sample carries an even share of it. Completion
    tokens are per sample when known (a list), else the request total is shared evenly too.
    """
    prompt_shares = split_evenly(prompt_tokens, parts)
    cached_shares = split_evenly(min(cached_prompt_tokens, prompt_tokens), parts)
    reasoning_shares = split_evenly(reasoning_tokens, parts)
    if isinstance(completion_tokens, int):
        completion_shares = split_evenly(completion_tokens, parts)
    else:
        completion_shares = list(completion_tokens)
    return [
        Usage(prompt_tokens=p, completion_tokens=c, cached_prompt_tokens=k, reasoning_tokens=r)
        for p, c, k, r in zip(prompt_shares, completion_shares, cached_shares, reasoning_shares, strict=True)
    ]


def cached_prompt_tokens(usage: Any) -> int:
    """Prompt tokens a provider says it served from its prompt cache, from a usage object or dict.

    OpenAI, vLLM, llama.cpp's server and litellm (normalised over Anthropic, Gemini, ...) report
    `prompt_tokens_details.cached_tokens`; DeepSeek reports `prompt_cache_hit_tokens`; litellm also
    keeps Anthropic's `cache_read_input_tokens`. The first one present wins; none means 0.
    """
    details = field(usage, "prompt_tokens_details")
    for value in (
        field(details, "cached_tokens"),
        field(usage, "prompt_cache_hit_tokens"),
        field(usage, "cache_read_input_tokens"),
    ):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def field(container: Any, name: str) -> Any:
    """`container[name]` of a dict (a raw JSON reply), else the attribute of an SDK object; None if absent."""
    if container is None:
        return None
    if isinstance(container, dict):
        return container.get(name)
    value = getattr(container, name, None)
    if value is None:  # pydantic models keep unknown provider fields (DeepSeek's) in model_extra
        extra = getattr(container, "model_extra", None)
        if isinstance(extra, dict):
            value = extra.get(name)
    return value


__all__ = ["cached_prompt_tokens", "field", "share_usage", "split_evenly"]
