"""Retry-After parsing and HTTP status → typed error, shared by the openai and litellm backends."""

from __future__ import annotations

import email.utils

import pytest

from tfgrpo.llm.backends.errors_map import is_context_window_message, map_status_error, parse_retry_after
from tfgrpo.llm.backends.usage import share_usage, split_evenly
from tfgrpo.llm.errors import (
    ContextWindowExceededError,
    InvalidRequestError,
    PermanentError,
    RateLimitError,
    RequestTimeoutError,
    ServerError,
    TransientError,
)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "12"}, 12.0),
        ({"retry-after": "0.5"}, 0.5),
        ({"Retry-After-Ms": "250", "Retry-After": "9"}, 0.25),  # the finer one wins
        ({"Retry-After": "-3"}, 0.0),
        ({"Retry-After": "soon"}, None),
        ({}, None),
        (None, None),
    ],
)
def test_parse_retry_after(headers, expected):
    assert parse_retry_after(headers) == expected


def test_parse_retry_after_http_date():
    now = 1_800_000_000.0
    header = email.utils.formatdate(now + 90, usegmt=True)
    assert parse_retry_after({"Retry-After": header}, now=now) == pytest.approx(90.0)
    past = email.utils.formatdate(now - 90, usegmt=True)
    assert parse_retry_after({"Retry-After": past}, now=now) == 0.0


@pytest.mark.parametrize(
    ("status", "message", "kind"),
    [
        (429, "slow down", RateLimitError),
        (408, "timeout", RequestTimeoutError),
        (500, "boom", ServerError),
        (529, "overloaded", ServerError),
        (400, "This model's maximum context length is 4096 tokens", ContextWindowExceededError),
        (400, "Requested tokens (5000) exceed context window of 2048", ContextWindowExceededError),
        (400, "temperature must be <= 2", InvalidRequestError),  # this request; a step where all fail stops
        (401, "bad key", PermanentError),
        (404, "no such model", PermanentError),
    ],
)
def test_map_status_error(status, message, kind):
    error = map_status_error(status, message, {"Retry-After": "3"})
    assert type(error) is kind
    assert isinstance(error, TransientError) == (status in (408, 429) or status >= 500)
    if kind is RateLimitError:
        assert error.retry_after == 3.0


def test_context_window_phrases():
    assert is_context_window_message("prompt is too long: 210000 tokens > 200000 maximum")
    assert not is_context_window_message("invalid value for top_p")


def test_usage_is_shared_exactly():
    assert split_evenly(10, 3) == [4, 3, 3]
    shares = share_usage(10, [5, 0, 7], 3)
    assert [u.prompt_tokens for u in shares] == [4, 3, 3]
    assert [u.completion_tokens for u in shares] == [5, 0, 7]
    assert sum(u.completion_tokens for u in share_usage(10, 9, 4)) == 9
