"""Forwarding to a backend of the client layer (`--upstream llm:BACKEND[:MODEL]`): litellm model names,
an OpenAI API, or a model in this process (llama.cpp, transformers; default: the embedded SmolLM2).

The request (library already injected) becomes a typed `ChatRequest` and goes through `LLMClient`,
so the client layer's retries, concurrency bound, accounting and error types apply as for learn and
eval. What a `ChatRequest` cannot express is refused with a 400 naming the field, never dropped.
The backends return whole completions, so a streamed request gets the reply as ONE content chunk,
then the finish chunk (and the usage chunk if `stream_options.include_usage`), then `[DONE]`
(`replies.sse_from_completion`). A reply past `max_reply_bytes` (its texts, UTF-8) is a 502
`upstream_reply_too_large`, as from an HTTP upstream, so what serve answers and traces is bounded whatever
the backend's own limits are.
"""

from __future__ import annotations

import json
import time
from typing import Any

from tfgrpo.llm.client import LLMClient
from tfgrpo.llm.errors import (
    BackendUnavailableError,
    ConnectionFailedError,
    InvalidRequestError,
    LLMError,
    MalformedResponseError,
    RateLimitError,
    RequestFailedError,
    RequestTimeoutError,
    TransientError,
)
from tfgrpo.llm.types import ChatRequest, Completion, Message, ResponseSchema, SamplingParams
from tfgrpo.serve.errors import error_bytes, redact
from tfgrpo.serve.exchange import BadRequest, Exchange
from tfgrpo.serve.replies import content_text
from tfgrpo.serve.upstream import UpstreamFailure

TAG = "serve"
#: request fields that change nothing a backend of the client layer produces
IGNORED_FIELDS = {"model", "user", "stream", "stream_options"}
SAMPLING_FIELDS = {"temperature", "top_p", "max_tokens", "max_completion_tokens", "stop", "seed", "n"}
MESSAGE_ROLES = {"system", "user", "assistant", "tool"}


class LLMUpstream:
    """The proxy's upstream when it is the client layer: same role as `Upstream`, whole replies only."""

    def __init__(self, client: LLMClient, spec: str, *, max_reply_bytes: int):
        self.client = client
        self.urls = [spec]  # what traces and /health name as the upstream
        self.max_reply_bytes = max_reply_bytes

    @property
    def model_name(self) -> str:
        return self.client.model_name

    async def open(self) -> None:
        """Nothing to connect: an in-process model loads on its first request."""

    async def aclose(self) -> None:
        await self.client.aclose()

    async def get(self, path: str, *, authorization: str | None = None) -> tuple[int, bytes]:
        """`authorization` is refused with an llm: upstream (config), so never given."""
        if path != "/models":
            return 404, error_bytes(404, f"{path} is not served by an llm: upstream", "unknown_route")
        model = {"id": self.model_name, "object": "model", "created": 0, "owned_by": "tfgrpo"}
        return 200, json.dumps({"object": "list", "data": [model]}).encode()

    def record(self, **_usage: Any) -> None:
        """The client layer already counted the call (tokens, latency, retries, failures)."""

    def snapshot(self) -> dict[str, Any]:
        totals = self.client.accounting.snapshot()["total"]
        retries = sum(value for key, value in totals.items() if key.startswith("retries_"))
        return totals | {"retries": retries}

    async def complete(self, exchange: Exchange) -> list[Completion]:
        """The completions for one exchange, or UpstreamFailure with the status the client gets."""
        try:
            request = chat_request(exchange.body, self.client)
        except BadRequest as exc:
            raise UpstreamFailure(400, error_bytes(400, str(exc), exc.code), code=exc.code) from None
        try:
            completions = await self.client.generate(request)
        except LLMError as exc:
            raise failure_of(exc) from None
        size = sum(len(json.dumps(_message(completion), ensure_ascii=False).encode()) for completion in completions)
        if size > self.max_reply_bytes:
            message = f"the upstream's reply ({size} bytes) is larger than max_reply_bytes ({self.max_reply_bytes})"
            raise UpstreamFailure(
                502, error_bytes(502, message, "upstream_reply_too_large"), code="upstream_reply_too_large"
            )
        return completions

    def completion(self, exchange: Exchange, completions: list[Completion]) -> dict[str, Any]:
        """The completions as one chat.completion object."""
        choices = [
            {"index": position, "message": _message(completion), "finish_reason": completion.finish_reason or "stop"}
            for position, completion in enumerate(completions)
        ]
        return {
            "id": f"chatcmpl-{exchange.id}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": choices,
            "usage": usage_of(completions),
        }


def chat_request(body: dict[str, Any], client: LLMClient) -> ChatRequest:
    """The typed request of an OpenAI chat body; BadRequest names what the client layer cannot honour."""
    backend = client.backends[0]
    allowed = IGNORED_FIELDS | SAMPLING_FIELDS | {"messages", "response_format"}
    if backend.supports_tools:
        allowed |= {"tools"}
    refused = sorted(key for key, value in body.items() if key not in allowed and value is not None)
    if body.get("tool_choice") in (None, "auto"):
        refused = [key for key in refused if key != "tool_choice"]
    if refused:
        raise BadRequest(f"not supported by the llm upstream {client.model_name}: {', '.join(refused)}")
    return ChatRequest(
        messages=[_typed_message(position, message) for position, message in enumerate(body["messages"])],
        n=_integer(body, "n", 1),
        sampling=_sampling(body),
        tools=body.get("tools"),
        tag=TAG,
        response_schema=_response_schema(body.get("response_format"), backend.supports_response_schema),
    )


def failure_of(error: LLMError) -> UpstreamFailure:
    """The HTTP answer to a client-layer error: the status an HTTP upstream would have given."""
    attempts = error.attempts if isinstance(error, RequestFailedError) else 1
    cause = error.cause if isinstance(error, RequestFailedError) and isinstance(error.cause, LLMError) else error
    if isinstance(cause, RateLimitError):
        status, code = 429, "rate_limit_exceeded"
    elif isinstance(cause, RequestTimeoutError):
        status, code = 504, "upstream_timeout"
    elif isinstance(cause, ConnectionFailedError):
        status, code = 502, "upstream_unreachable"
    elif isinstance(cause, MalformedResponseError):
        status, code = 502, "bad_upstream_body"
    elif isinstance(cause, TransientError):
        status, code = (cause.status or 502), "upstream_error"
    elif isinstance(cause, InvalidRequestError):
        status, code = 400, "invalid_request"
    elif isinstance(cause, BackendUnavailableError):
        status, code = 503, "upstream_unavailable"
    else:  # a bad key, an unknown model, the budget: the server's configuration, not the request
        status, code = 502, "upstream_error"
    headers = {}
    retry_after = getattr(cause, "retry_after", None)
    if retry_after is not None:
        headers["retry-after"] = str(max(1, round(retry_after)))
    message = redact(str(cause).splitlines()[0], []) if str(cause) else type(cause).__name__
    return UpstreamFailure(status, error_bytes(status, message, code), headers, attempts=attempts, code=code)


def usage_of(completions: list[Completion]) -> dict[str, int]:
    prompt = sum(c.usage.prompt_tokens for c in completions)
    completion = sum(c.usage.completion_tokens for c in completions)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _typed_message(position: int, message: dict[str, Any]) -> Message:
    if message.get("role") not in MESSAGE_ROLES:
        raise BadRequest(f"messages[{position}]: role {message.get('role')!r} is not one of {sorted(MESSAGE_ROLES)}")
    content = message.get("content")
    if isinstance(content, list):
        if any(not isinstance(part, dict) or part.get("type") != "text" for part in content):
            raise BadRequest(f"messages[{position}]: only text content parts are supported by the llm upstream")
        message = message | {"content": content_text(content)}
    elif content is not None and not isinstance(content, str):
        raise BadRequest(f"messages[{position}]: content must be a string or a list of text parts")
    try:
        return Message.model_validate(message)
    except ValueError as exc:
        raise BadRequest(f"messages[{position}]: {_first_error(exc)}") from None


def _sampling(body: dict[str, Any]) -> SamplingParams:
    values: dict[str, Any] = {}
    for name in ("temperature", "top_p"):
        if body.get(name) is not None:
            values[name] = body[name]
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None:
        values["max_tokens"] = max_tokens
    stop = body.get("stop")
    if stop is not None:
        values["stop"] = [stop] if isinstance(stop, str) else stop
    if body.get("seed") is not None:
        values["seed"] = body["seed"]
    try:
        return SamplingParams.model_validate(values)
    except ValueError as exc:
        raise BadRequest(_first_error(exc)) from None


def _first_error(exc: ValueError) -> str:
    """`field: message` of a pydantic validation error's first problem (one line for the 400)."""
    errors = exc.errors() if hasattr(exc, "errors") else []
    if not errors:
        return str(exc).splitlines()[0]
    return f"{'.'.join(map(str, errors[0]['loc']))}: {errors[0]['msg']}"


def _integer(body: dict[str, Any], name: str, default: int) -> int:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise BadRequest(f"'{name}' must be a positive integer")
    return value


def _response_schema(response_format: Any, supported: bool) -> ResponseSchema | None:
    if response_format is None or response_format == {"type": "text"}:
        return None
    spec = response_format.get("json_schema") if isinstance(response_format, dict) else None
    if not isinstance(spec, dict) or response_format.get("type") != "json_schema" or "schema" not in spec:
        raise BadRequest("response_format: the llm upstream takes only {'type': 'json_schema', 'json_schema': {...}}")
    if not supported:
        raise BadRequest("response_format: this llm upstream's backend cannot enforce a JSON schema")
    return ResponseSchema(name=str(spec.get("name") or "reply"), schema=spec["schema"])


def _message(completion: Completion) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": completion.text}
    if completion.tool_calls:
        message["tool_calls"] = completion.tool_calls
    return message
