"""Per-sample token usage: a request's usage shared over its `n` samples so that the sum is exact."""

from __future__ import annotations

from tfgrpo.llm.types import Usage


def split_evenly(total: int, parts: int) -> list[int]:
    """`total` split into `parts` integers that differ by at most one and sum to `total`."""
    if parts <= 0:
        return []
    base, extra = divmod(max(total, 0), parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def share_usage(prompt_tokens: int, completion_tokens: list[int] | int, parts: int) -> list[Usage]:
    """Usage of each of `parts` samples.

    The prompt is billed once per request, so each sample carries an even share of it. Completion
    tokens are per sample when known (a list), else the request total is shared evenly too.
    """
    prompt_shares = split_evenly(prompt_tokens, parts)
    if isinstance(completion_tokens, int):
        completion_shares = split_evenly(completion_tokens, parts)
    else:
        completion_shares = list(completion_tokens)
    return [Usage(prompt_tokens=p, completion_tokens=c) for p, c in zip(prompt_shares, completion_shares, strict=True)]


__all__ = ["share_usage", "split_evenly"]
