"""The one thing a backend implements: turn a request into completions."""

from __future__ import annotations

import abc

from tfgrpo.llm.types import ChatRequest, Completion


class Backend(abc.ABC):
    """A model endpoint. Backends implement only `forward`; the `LLMClient` wraps every backend once
    with caching, retries, bounded concurrency, routing and accounting.

    `forward` returns exactly `request.n` completions with per-sample `usage` filled where known, and
    raises the typed errors of `tfgrpo.llm.errors` (TransientError subclasses are retried).
    """

    #: label used for the cache key and for pricing (e.g. "gpt-4o-mini", "smollm2-135m-instruct")
    model_name: str = "unknown"
    #: an endpoint id for least-busy routing and per-endpoint concurrency (e.g. a base URL)
    endpoint: str = "local"
    #: whether `forward` honours `n` natively (else the client fans out n single-sample calls)
    supports_n: bool = True
    #: whether the backend understands OpenAI `tools` (native tool calling)
    supports_tools: bool = False
    #: whether `forward` enforces `request.response_schema` (response_format, a grammar, guided decoding)
    supports_response_schema: bool = False

    @abc.abstractmethod
    async def forward(self, request: ChatRequest) -> list[Completion]:
        """Run one request."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections or models."""
