"""The one client every LLM call goes through.

Backends implement only `forward`; this class wraps them once with the per-sample response cache,
the retry policy and least-busy routing of `tfgrpo.llm.retry` (shared with serve's HTTP passthrough),
per-endpoint bounded concurrency, token/cost/latency accounting and the budget cap.

Structured outputs (`structured_output`): "off" drops every request's JSON schema; "on" sends it and
refuses a backend that cannot enforce one; "auto" sends it where the backend can, and when an endpoint
rejects it (HTTP 400/422, unsupported parameter) resends that request without it, remembers the endpoint
(`schema_fallbacks`) and never sends it a schema again: the tolerant parser takes over, no step fails.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

from tfgrpo.llm.accounting import Accounting, Pricing
from tfgrpo.llm.backends.profiles import ProviderProfile
from tfgrpo.llm.base import Backend
from tfgrpo.llm.cache import ResponseCache
from tfgrpo.llm.errors import (
    BackendUnavailableError,
    BudgetExceededError,
    ContextWindowExceededError,
    InvalidRequestError,
    MalformedResponseError,
    RequestTimeoutError,
)
from tfgrpo.llm.retry import LeastBusy, RetryPolicy
from tfgrpo.llm.types import ChatRequest, Completion, Message, ResponseSchema, SamplingParams

T = TypeVar("T")
STRUCTURED_OUTPUT_MODES = ("auto", "on", "off")


#: most characters any tokenizer packs into one token (long runs of spaces or digits in BPE vocabularies):
#: chars / this is a count no real prompt is under
MAX_CHARS_PER_TOKEN = 16


class LLMClient:
    def __init__(
        self,
        backends: Backend | Sequence[Backend],
        *,
        cache: ResponseCache | None = None,
        concurrency: int = 64,
        max_retries: int = 5,
        timeout_s: float = 600.0,
        pricing: Pricing | None = None,
        budget_usd: float | None = None,
        backoff_initial_s: float = 1.0,
        backoff_max_s: float = 60.0,
        retry_after_max_s: float = 300.0,
        context_tokens: int | None = None,
        structured_output: str = "auto",
    ):
        self.backends = [backends] if isinstance(backends, Backend) else list(backends)
        if not self.backends:
            raise ValueError("LLMClient needs at least one backend")
        if structured_output not in STRUCTURED_OUTPUT_MODES:
            raise ValueError(f"structured_output must be one of {', '.join(STRUCTURED_OUTPUT_MODES)}")
        unable = [b.endpoint for b in self.backends if not b.supports_response_schema]
        if structured_output == "on" and unable:
            raise BackendUnavailableError(
                f"structured_output=on, but {', '.join(unable)} cannot enforce a JSON schema; use auto or off"
            )
        self.structured_output = structured_output
        #: endpoints that rejected a JSON schema once (endpoint -> the error), sent none since
        self.schema_fallbacks: dict[str, str] = {}
        self.model_name = self.backends[0].model_name
        self.cache = cache
        self.retry = RetryPolicy(max_retries, backoff_initial_s, backoff_max_s, retry_after_max_s)
        self.timeout_s = timeout_s
        self.pricing = pricing or Pricing()
        self.budget_usd = budget_usd
        self.accounting = Accounting()
        #: the model's context window where known: prompts that cannot fit are refused before sending
        self.context_tokens = context_tokens
        self._concurrency = concurrency
        self._semaphores: dict[str, asyncio.Semaphore] = {}
        self._router = LeastBusy(b.endpoint for b in self.backends)
        # the first backend of an endpoint answers for it
        self._backend_at = {backend.endpoint: backend for backend in reversed(self.backends)}
        self._in_flight_samples: dict[str, asyncio.Future[Completion]] = {}

    # ------------------------------------------------------------------ public API
    async def chat(
        self,
        messages: Sequence[Message | dict[str, Any]],
        *,
        n: int = 1,
        sampling: SamplingParams | None = None,
        tools: list[dict[str, Any]] | None = None,
        tag: str = "",
        sample_offset: int = 0,
        response_schema: ResponseSchema | None = None,
    ) -> list[Completion]:
        """`response_schema`: the JSON schema the reply must follow, enforced where the backend can."""
        request = ChatRequest(
            messages=[m if isinstance(m, Message) else Message.model_validate(m) for m in messages],
            n=n,
            sampling=sampling or SamplingParams(),
            tools=tools,
            tag=tag,
            sample_offset=sample_offset,
            response_schema=None if self.structured_output == "off" else response_schema,
        )
        return await self.generate(request)

    async def generate(self, request: ChatRequest) -> list[Completion]:
        """All `request.n` samples, each from the cache when present, else from a backend."""
        indices = list(range(request.sample_offset, request.sample_offset + request.n))
        keys = {i: request.sample_key(self.model_name, i) for i in indices}
        results: dict[int, Completion] = {}
        if self.cache is not None:
            for i in indices:
                hit = self.cache.get(keys[i])
                if hit is not None:
                    # The sample keeps its token counts (they describe the text); it costs nothing now.
                    results[i] = hit.model_copy(update={"cached": True, "cost_usd": 0.0, "latency_s": 0.0, "index": i})
            if results:
                self.accounting.record_cached(request.tag, len(results))
        missing = [i for i in indices if i not in results]
        # The same sample already being fetched by another caller is awaited, not paid for twice.
        waiting = {i: self._in_flight_samples[keys[i]] for i in missing if keys[i] in self._in_flight_samples}
        to_fetch = [i for i in missing if i not in waiting]
        loop = asyncio.get_running_loop()
        promises = {i: loop.create_future() for i in to_fetch}
        for i, promise in promises.items():
            promise.add_done_callback(_consume_exception)
            self._in_flight_samples[keys[i]] = promise
        try:
            # A partly cached group asks only for what is missing, one contiguous run at a time.
            for run in _contiguous_runs(to_fetch):
                whole = len(run) == request.n  # nothing cached: the request itself, no copy
                sub = request if whole else request.model_copy(update={"n": len(run), "sample_offset": run[0]})
                fresh = await self._call_with_retries(sub)  # numbered from sub.sample_offset, cached=False
                if self.cache is not None:
                    self.cache.put_many(
                        self.model_name, [(keys[i], completion) for i, completion in zip(run, fresh, strict=False)]
                    )
                for i, completion in zip(run, fresh, strict=False):
                    results[i] = completion
                    promises[i].set_result(completion)
        except BaseException as exc:
            for promise in promises.values():
                if not promise.done():
                    promise.set_exception(exc)
            raise
        finally:
            for i in to_fetch:
                self._in_flight_samples.pop(keys[i], None)
        for i, promise in waiting.items():
            shared = await promise
            results[i] = shared.model_copy(update={"cached": True, "cost_usd": 0.0, "latency_s": 0.0, "index": i})
        if waiting:
            self.accounting.record_cached(request.tag, len(waiting))
        return [results[i] for i in indices]

    def chat_sync(self, messages: Sequence[Message | dict[str, Any]], **kwargs: Any) -> list[Completion]:
        """One call from synchronous code (the CLI's `chat`); not for use inside a running event loop."""

        async def once() -> list[Completion]:
            try:
                return await self.chat(messages, **kwargs)
            finally:
                await self.aclose()

        return asyncio.run(once())

    def completer(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        sampling: SamplingParams | None = None,
        tag: str = "judge",
        response_schema: ResponseSchema | None = None,
    ):
        """A sync `complete(messages) -> Completion` for code running in a worker thread (the judge reward,
        which reads `.text` and `.schema_enforced`)."""

        def complete(messages: list[dict[str, Any]]) -> Completion:
            call = self.chat(messages, sampling=sampling, tag=tag, response_schema=response_schema)
            future = asyncio.run_coroutine_threadsafe(call, loop)
            return future.result()[0]

        return complete

    async def aclose(self) -> None:
        for backend in self.backends:
            await backend.aclose()

    def close_cache(self) -> None:
        if self.cache is not None:
            self.cache.close()

    # ------------------------------------------------------------------ internals
    def _check_budget(self) -> None:
        if self.budget_usd is not None and self.accounting.cost_usd >= self.budget_usd:
            raise BudgetExceededError(self.accounting.cost_usd, self.budget_usd)

    def _check_context(self, request: ChatRequest) -> None:
        """Refuse (not retried, never sent) a prompt that cannot fit the model's context window.

        Without the model's tokenizer the count is a lower bound (no tokenizer packs more than
        MAX_CHARS_PER_TOKEN characters per token), so a prompt is never refused that might fit."""
        if self.context_tokens is None:
            return
        chars = sum(len(message.content or "") for message in request.messages)
        at_least = chars // MAX_CHARS_PER_TOKEN
        if at_least > self.context_tokens:
            raise ContextWindowExceededError(
                f"{request.tag or 'LLM'} prompt of {chars:,} characters (at least {at_least:,} tokens) cannot fit "
                f"{self.model_name}'s context window of {self.context_tokens:,} tokens; not sent"
            )

    def _semaphore(self, endpoint: str) -> asyncio.Semaphore:
        # Created lazily so the semaphore belongs to the running event loop.
        if endpoint not in self._semaphores:
            self._semaphores[endpoint] = asyncio.Semaphore(self._concurrency)
        return self._semaphores[endpoint]

    async def _call_with_retries(self, request: ChatRequest) -> list[Completion]:
        self._check_budget()
        self._check_context(request)
        return await self.retry.run(lambda _attempt: self._call_once(request), self.accounting, request.tag)

    async def _call_once(self, request: ChatRequest) -> list[Completion]:
        self._check_budget()
        backend = self._backend_at[self._router.pick()]
        self._router.start(backend.endpoint)
        try:
            async with self._semaphore(backend.endpoint):
                # again once a slot is free: the calls that finished while this one queued may have spent
                # the budget (long reasoning replies), and only the calls already sent may overshoot it
                self._check_budget()
                started = time.perf_counter()
                sent = self._fit_schema(request, backend)
                try:
                    completions = await self._forward(backend, sent)
                except InvalidRequestError as exc:
                    if not self._may_fall_back(sent, exc):
                        raise
                    sent = sent.model_copy(update={"response_schema": None})
                    completions = await self._forward(backend, sent)  # fails as usual if the schema was not it
                    self.schema_fallbacks[backend.endpoint] = f"{type(exc).__name__}: {exc}"
                latency = time.perf_counter() - started
        finally:
            self._router.done(backend.endpoint)
        if len(completions) != request.n:
            raise MalformedResponseError(f"{backend.endpoint} returned {len(completions)} samples, {request.n} asked")
        priced = []
        for position, completion in enumerate(completions):
            usage = completion.usage
            cost = self.pricing.cost(usage.prompt_tokens, usage.completion_tokens, usage.cached_prompt_tokens)
            # One copy per sample (the backend's object stays untouched): priced, timed and numbered.
            update = {
                "cost_usd": cost,
                "latency_s": latency,
                "index": request.sample_offset + position,
                "cached": False,
                "schema_enforced": sent.response_schema is not None,
            }
            priced.append(completion.model_copy(update=update))
        self.accounting.record_call(
            request.tag,
            samples=len(priced),
            prompt_tokens=sum(c.usage.prompt_tokens for c in priced),
            cached_prompt_tokens=sum(c.usage.cached_prompt_tokens for c in priced),
            completion_tokens=sum(c.usage.completion_tokens for c in priced),
            reasoning_tokens=sum(c.usage.reasoning_tokens for c in priced),
            cost_usd=sum(c.cost_usd for c in priced),
            latency_s=latency,
        )
        return priced

    async def _forward(self, backend: Backend, request: ChatRequest) -> list[Completion]:
        try:
            return await _within(backend.forward(request), self.timeout_s)
        except asyncio.TimeoutError as exc:
            raise RequestTimeoutError(f"no reply from {backend.endpoint} within {self.timeout_s:.0f}s") from exc

    def provider_profiles(self) -> dict[str, str]:
        """What each endpoint was found to accept (backends that follow a provider profile), for the run record."""
        profiles = {backend.endpoint: getattr(backend, "profile", None) for backend in self.backends}
        return {endpoint: profile.describe() for endpoint, profile in profiles.items() if profile is not None}

    def provider_records(self) -> dict[str, dict[str, Any]]:
        """Each endpoint's provider profile as saved data (a learn run's state), for `remember_providers`."""
        return {
            backend.endpoint: {"model": backend.model_name, "profile": profile.to_record()}
            for backend in self.backends
            if (profile := getattr(backend, "profile", None)) is not None
        }

    def remember_providers(self, records: dict[str, Any]) -> list[str]:
        """Start each endpoint from the profile an earlier session learned for it (same endpoint and model),
        so a resumed run does not pay its refusals again; returns the endpoints that took one."""
        remembered = []
        for backend in self.backends:
            record = records.get(backend.endpoint)
            if not isinstance(record, dict) or record.get("model") != backend.model_name:
                continue
            profile = ProviderProfile.from_record(record.get("profile"))
            if profile is not None and hasattr(backend, "remember"):
                backend.remember(profile)
                remembered.append(backend.endpoint)
        return remembered

    def _fit_schema(self, request: ChatRequest, backend: Backend) -> ChatRequest:
        """The request as this backend gets it: without the schema where it cannot or will not take one."""
        if request.response_schema is None:
            return request
        if backend.supports_response_schema and backend.endpoint not in self.schema_fallbacks:
            return request
        return request.model_copy(update={"response_schema": None})

    def _may_fall_back(self, sent: ChatRequest, error: InvalidRequestError) -> bool:
        # A 400 on a request with a schema may be the schema; a too-long prompt is not.
        return (
            self.structured_output == "auto"
            and sent.response_schema is not None
            and not isinstance(error, ContextWindowExceededError)
        )


async def _within(awaitable: Awaitable[T], timeout_s: float) -> T:
    """`await awaitable`, raising TimeoutError after `timeout_s`; `asyncio.timeout` (3.11+) does it
    without the extra task `asyncio.wait_for` creates per call."""
    if _timeout is None:
        return await asyncio.wait_for(awaitable, timeout=timeout_s)
    async with _timeout(timeout_s):
        return await awaitable


_timeout = getattr(asyncio, "timeout", None)


def _consume_exception(future: asyncio.Future) -> None:
    # A failure is re-raised to its own caller; waiters that never came must not log "never retrieved".
    if not future.cancelled():
        future.exception()


def _contiguous_runs(indices: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for i in indices:
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs
