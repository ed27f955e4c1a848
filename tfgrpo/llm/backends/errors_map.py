"""SDK exceptions (openai, litellm, httpx) mapped to the typed errors of `tfgrpo.llm.errors`.

The client layer decides what to retry from the error's *type*, and how long to wait from its
`retry_after`, so every backend funnels its SDK's failures through here. litellm's exceptions subclass
openai's, so one mapping serves both; litellm-specific subclasses are checked first.
"""

from __future__ import annotations

import email.utils
import re
import time
from collections.abc import Mapping

from tfgrpo.llm.errors import (
    ConnectionFailedError,
    ContextWindowExceededError,
    InvalidRequestError,
    LLMError,
    MalformedResponseError,
    PermanentError,
    RateLimitError,
    RequestTimeoutError,
    ServerError,
)

# Phrases servers use for "prompt too long" (OpenAI, vLLM, llama.cpp, Anthropic via litellm, ...).
_CONTEXT_WINDOW_PATTERNS = re.compile(
    r"context[_ ]length[_ ]exceeded|maximum context length|context window|exceeds? the context|"
    r"prompt is too long|too many tokens|input is too long|exceed context|maximum model length",
    re.IGNORECASE,
)

# What SDKs say when a 200 body is not a completion (json.JSONDecodeError, litellm's checks).
_MALFORMED_PATTERNS = re.compile(
    r"Expecting value|JSONDecodeError|Unterminated string|Extra data|Invalid control character|"
    r"returned (?:a response with no )?'choices'|Invalid response object|"
    r"could not (?:be )?(?:parse|decode)d?|failed to (?:parse|decode)",
    re.IGNORECASE,
)

# What SDKs say when no key was given (litellm wraps it as an InternalServerError).
_MISSING_KEY_PATTERNS = re.compile(
    r"Missing credentials|api_key client option must be set|No API key provided", re.IGNORECASE
)


def parse_retry_after(headers: Mapping[str, str] | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from `retry-after-ms`, or `Retry-After` (seconds or an HTTP date); None if absent."""
    if not headers:
        return None
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    millis = lowered.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000.0)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def is_context_window_message(message: str) -> bool:
    return bool(_CONTEXT_WINDOW_PATTERNS.search(message or ""))


def _headers_of(exc: BaseException) -> Mapping[str, str] | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers:
        return headers
    # litellm keeps provider headers here when it builds its own response object
    extra = getattr(exc, "litellm_response_headers", None)
    return extra if isinstance(extra, Mapping) else None


def _status_of(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return status
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def map_status_error(status: int | None, message: str, headers: Mapping[str, str] | None = None) -> LLMError:
    """The typed error for an HTTP error status (any SDK)."""
    detail = f"HTTP {status}: {message}" if status is not None else message
    if status == 429:
        return RateLimitError(detail, retry_after=parse_retry_after(headers), status=status)
    if status == 408:
        return RequestTimeoutError(detail, status=status)
    if status is not None and status >= 500:
        return ServerError(detail, retry_after=parse_retry_after(headers), status=status)
    if status in (400, 413, 422) and is_context_window_message(message):
        return ContextWindowExceededError(detail)
    if status in (401, 403):
        return PermanentError(f"{detail} (check the API key)")
    if status == 404:
        return PermanentError(f"{detail} (check the model name and base URL)")
    if status in (400, 413, 422):
        return InvalidRequestError(detail)
    return PermanentError(detail)


def map_openai_error(exc: BaseException) -> LLMError:
    """Map an `openai` SDK exception (or a litellm one, which subclass them) to our typed error."""
    import openai

    if isinstance(exc, LLMError):
        return exc
    message = _message_of(exc)
    if isinstance(exc, openai.APITimeoutError) and _refused(exc):
        # The SDK's aiohttp transport maps a refused connection to ConnectTimeout: say what happened.
        return ConnectionFailedError(f"could not reach the server: {_refused(exc)}")
    if isinstance(exc, openai.APITimeoutError):  # subclass of APIConnectionError: check first
        return RequestTimeoutError(f"request timed out: {message}")
    if isinstance(exc, openai.APIConnectionError):
        return ConnectionFailedError(f"could not reach the server: {message}")
    if isinstance(exc, openai.APIResponseValidationError):
        return MalformedResponseError(f"the server's reply is not a valid completion: {message}")
    if isinstance(exc, openai.APIStatusError):
        return map_status_error(_status_of(exc), message, _headers_of(exc))
    if isinstance(exc, openai.APIError):  # e.g. an error event inside a 200 body
        status = _status_of(exc)
        if status is not None:
            return map_status_error(status, message, _headers_of(exc))
        return MalformedResponseError(f"the server returned an error instead of a completion: {message}")
    if isinstance(exc, ValueError):  # json.JSONDecodeError and pydantic errors from a broken body
        return MalformedResponseError(f"the server's reply could not be parsed: {message}")
    return PermanentError(f"{type(exc).__name__}: {message}")


def map_litellm_error(exc: BaseException) -> LLMError:
    """Map a litellm exception to our typed error (litellm re-raises providers' errors as its own)."""
    import litellm

    if isinstance(exc, LLMError):
        return exc
    message = str(getattr(exc, "message", None) or exc)
    if isinstance(exc, litellm.ContextWindowExceededError):
        return ContextWindowExceededError(message)
    if _MISSING_KEY_PATTERNS.search(message):  # litellm reports a missing key as a "500"
        return PermanentError(
            f"no API key: pass --api-key (any value for a local server) or set the provider's variable: {message}"
        )
    if isinstance(exc, litellm.RateLimitError):
        return RateLimitError(message, retry_after=parse_retry_after(_headers_of(exc)), status=429)
    if isinstance(exc, litellm.Timeout):
        return RequestTimeoutError(f"request timed out: {message}")
    if isinstance(exc, litellm.InternalServerError) and _looks_malformed(message):
        # litellm reports a body it could not parse as its own "500"
        return MalformedResponseError(f"the server's reply could not be parsed: {message}")
    if isinstance(exc, (litellm.ServiceUnavailableError, litellm.InternalServerError)):
        status = _status_of(exc) or 500
        return ServerError(message, retry_after=parse_retry_after(_headers_of(exc)), status=status)
    if isinstance(exc, litellm.APIConnectionError):
        # litellm wraps many local failures (including unparsable bodies) as APIConnectionError
        if _looks_malformed(message):
            return MalformedResponseError(f"the server's reply could not be parsed: {message}")
        return ConnectionFailedError(f"could not reach the server: {message}")
    if isinstance(exc, litellm.APIError) and _status_of(exc) is None and _looks_malformed(message):
        return MalformedResponseError(f"the server's reply could not be parsed: {message}")
    return map_openai_error(exc)


def _message_of(exc: BaseException) -> str:
    """The server's own error message when the body carries one (`{"error": {"message": ...}}`)."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return inner["message"]
        if isinstance(inner, str):
            return inner
    return str(getattr(exc, "message", None) or exc)


def _looks_malformed(message: str) -> bool:
    return bool(_MALFORMED_PATTERNS.search(message or ""))


def describe(exc: BaseException) -> str:
    """One line about an exception, for error messages."""
    return f"{type(exc).__name__}: {exc}"


def _refused(exc: BaseException) -> str | None:
    """The text of an aiohttp connector error (connection refused, DNS failure) in `exc`'s causes, if any."""
    seen = exc.__cause__ or exc.__context__
    while seen is not None:
        if type(seen).__name__ == "ClientConnectorError":
            return str(seen)
        seen = seen.__cause__ or seen.__context__
    return None


__all__ = [
    "describe",
    "is_context_window_message",
    "map_litellm_error",
    "map_openai_error",
    "map_status_error",
    "parse_retry_after",
]
