"""Typed errors of the LLM layer, so callers tell an outage apart from a model's wrong answer."""

from __future__ import annotations


class LLMError(Exception):
    """Base class of every error the LLM layer raises."""


class BackendUnavailableError(LLMError):
    """The backend cannot be used here (missing extra, missing model file, bad configuration)."""


class TransientError(LLMError):
    """A failure worth retrying: rate limit, 5xx, timeout, dropped connection."""

    def __init__(self, message: str, *, retry_after: float | None = None, status: int | None = None):
        super().__init__(message)
        self.retry_after = retry_after
        self.status = status


class RateLimitError(TransientError):
    """HTTP 429 or a provider's rate-limit error; `retry_after` in seconds when the server said."""


class ServerError(TransientError):
    """HTTP 5xx."""


class RequestTimeoutError(TransientError):
    """The request did not finish in time."""


class ConnectionFailedError(TransientError):
    """The server could not be reached."""


class MalformedResponseError(TransientError):
    """The server answered with a body that is not a valid completion."""


class PermanentError(LLMError):
    """A failure retrying cannot fix: bad request, authentication, unknown model."""


class InvalidRequestError(PermanentError):
    """HTTP 400/413/422: the server refused this request's content (unlike a bad key or model name, which
    every request would hit)."""


class ContextWindowExceededError(InvalidRequestError):
    """The prompt does not fit the model's context window."""


class RequestFailedError(LLMError):
    """A request that still failed after every retry; `cause` is the last error."""

    def __init__(self, message: str, *, cause: BaseException | None = None, attempts: int = 0):
        super().__init__(message)
        self.cause = cause
        self.attempts = attempts


class BudgetExceededError(LLMError):
    """The run's cost cap was reached; no further calls are made."""

    def __init__(self, spent_usd: float, budget_usd: float):
        super().__init__(f"budget of ${budget_usd:.4f} reached (spent ${spent_usd:.4f}); no further LLM calls")
        self.spent_usd = spent_usd
        self.budget_usd = budget_usd


class AllRequestsFailedError(LLMError):
    """Every request of a step or an eval failed: the endpoint is down or misconfigured, not the model wrong."""


#: Failures that concern one request, not the run: recorded on that sample (excluded, counted) while
#: the run goes on. Everything else (a bad key, an unknown model, a missing adapter, the budget) stops it.
PER_REQUEST_FAILURES: tuple[type[LLMError], ...] = (RequestFailedError, InvalidRequestError)
