"""The one retry and routing policy of every call to a model server: `LLMClient` and serve's HTTP passthrough.

What is retried: a `TransientError` (an HTTP status is classified by `map_status_error`: 429, 408, 5xx).
How long to wait: the server's Retry-After, capped at `retry_after_max_s` (a server asking for an hour must
not stall a run for an hour), else tenacity's exponential backoff with jitter, so replicas recovering from
one outage are not hit by every caller at the same instant. Where to send: the least-busy replica.

A plain loop rather than tenacity's `AsyncRetrying`: every call pays for the loop, almost none is retried,
and `AsyncRetrying` costs much more CPU per call than this; the backoff is tenacity's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from tenacity import RetryCallState, wait_exponential_jitter

from tfgrpo.llm.accounting import Accounting
from tfgrpo.llm.errors import (
    MalformedResponseError,
    RateLimitError,
    RequestFailedError,
    RequestTimeoutError,
    ServerError,
    TransientError,
)

T = TypeVar("T")
K = TypeVar("K")


@dataclass
class RetryPolicy:
    """How often and after how long a transient failure is tried again."""

    max_retries: int = 5  # retries after the first attempt
    backoff_initial_s: float = 1.0  # the first backoff; 0: retry at once
    backoff_max_s: float = 60.0  # the longest backoff
    retry_after_max_s: float = 300.0  # the longest wait a server's Retry-After gets
    _wait: wait_exponential_jitter = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._wait = wait_exponential_jitter(multiplier=self.backoff_initial_s, max=self.backoff_max_s)

    def delay(self, error: TransientError, attempt: int) -> float:
        """Seconds to wait after failed attempt number `attempt`."""
        if error.retry_after is not None:
            return min(float(error.retry_after), self.retry_after_max_s)
        if self.backoff_initial_s <= 0:
            return 0.0
        state = RetryCallState(retry_object=None, fn=None, args=(), kwargs={})  # type: ignore[arg-type]
        state.attempt_number = attempt
        return self._wait(state)

    async def run(
        self,
        attempt: Callable[[int], Awaitable[T]],
        accounting: Accounting,
        tag: str,
        on_retry: Callable[[str], None] | None = None,
    ) -> T:
        """`attempt(number)` (1, 2, ...) until it returns, raises a non-transient error, or `max_retries`
        retries failed: then RequestFailedError with the last error as `cause`. Each retry is counted in
        `accounting` by cause (and given to `on_retry`), the final failure too."""
        number = 0
        while True:
            number += 1
            try:
                return await attempt(number)
            except TransientError as error:
                if number > self.max_retries:
                    last = error
                    break
                cause = retry_cause(error)
                accounting.record_retry(tag, cause)
                if on_retry is not None:
                    on_retry(cause)
                await asyncio.sleep(self.delay(error, number))
        accounting.record_failure(tag)
        raise RequestFailedError(
            f"{tag or 'LLM'} request failed after {number} attempt(s): {type(last).__name__}: {last}",
            cause=last,
            attempts=number,
        )


class LeastBusy(Generic[K]):
    """Least-busy routing: the replica with the fewest requests in flight (the first listed on a tie)."""

    def __init__(self, replicas: Iterable[K]):
        self.in_flight: dict[K, int] = dict.fromkeys(replicas, 0)

    def pick(self) -> K:
        return min(self.in_flight, key=self.in_flight.__getitem__)

    def start(self, replica: K) -> None:
        self.in_flight[replica] += 1

    def done(self, replica: K) -> None:
        self.in_flight[replica] -= 1


def retry_cause(error: TransientError) -> str:
    """The accounting bucket of a retried failure (RETRY_CAUSES)."""
    for kind, cause in (
        (RateLimitError, "rate_limit"),
        (ServerError, "server_error"),
        (RequestTimeoutError, "timeout"),
        (MalformedResponseError, "bad_body"),
    ):
        if isinstance(error, kind):
            return cause
    return "connection"
