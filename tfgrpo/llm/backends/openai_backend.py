"""Any OpenAI-compatible server (OpenAI, vLLM `vllm serve`, DeepSeek, llama.cpp server, Ollama, ...).

One backend instance per base URL: its `endpoint` is the URL, so the client layer can route across
replicas and bound concurrency per server. The SDK's own retries are off (`max_retries=0`): the client
layer retries once, for every backend, from the typed errors raised here.

Servers that ignore `n` (llama-cpp-python's server, some proxies) answer with fewer choices than asked,
and llama.cpp's own server refuses any `n` but 1. The first time either happens the backend remembers it
for this endpoint (its profile) and from then on sends `n` parallel single-sample requests instead, as it
does from the start for providers whose profile has no `n` (DeepSeek, Anthropic). When a `seed` is set, a call whose first sample has absolute index `i`
(`sample_offset` + position) is sent with `seed + i`, so samples fetched one by one differ from each
other but stay reproducible.

Parameters follow the provider's documented rules (`profiles.py`: `max_completion_tokens` and default
sampling for OpenAI's reasoning models, JSON mode and no `n`/`seed` for DeepSeek, ...), chosen from the
model name, learned from the first 400 that names a parameter or from the first reply's shape, and
remembered for the endpoint. A parameter the profile leaves out is never sent; a request that needs tools
the profile lacks is refused in one line. Reasoning text (where the profile says it lives:
`reasoning_content`, `reasoning`, a `<think>` block) is kept apart from the answer (`tfgrpo.llm.reasoning`).

A request's `response_schema` is sent as `response_format` `{"type": "json_schema", ..., "strict": true}`.
A server that refuses that form (400/422, or a 5xx naming response_format) is asked again with the next
form of RESPONSE_FORMATS (JSON mode with the schema attached, then plain JSON mode: DeepSeek and older
servers); the first form it takes is remembered for the endpoint. When all are refused the error reaches
the client as an InvalidRequestError, and the client drops the schema for this endpoint.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import time
from typing import Any

from tfgrpo.core.secrets import mask_url, mask_urls_logged_by, split_query
from tfgrpo.llm.backends.errors_map import map_openai_error
from tfgrpo.llm.backends.profiles import (
    RESPONSE_FORMATS,
    VLLM,
    ProviderProfile,
    learn_from_refusal,
    profile_for,
    read_count,
    recognise_from_reply,
)
from tfgrpo.llm.backends.usage import cached_prompt_tokens, field, share_usage
from tfgrpo.llm.base import Backend
from tfgrpo.llm.errors import (
    BackendUnavailableError,
    ContextWindowExceededError,
    InvalidRequestError,
    MalformedResponseError,
    ServerError,
)
from tfgrpo.llm.reasoning import reasoning_of, reasoning_tokens
from tfgrpo.llm.types import ChatRequest, Completion, ResponseSchema

logger = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Local servers accept any key; the SDK insists on one.
PLACEHOLDER_API_KEY = "EMPTY"
# The SDK's HTTP stacks; benchmarks/transport.py measures them (client CPU per call) and the faster is the default.
TRANSPORTS = ("httpx", "aiohttp")
DEFAULT_TRANSPORT = "aiohttp"
#: The auth `chat.completions.create` asks of the SDK (the API key as a bearer token, no admin key).
CHAT_SECURITY = {"bearer_auth": True}


class ChatCompletionsBackend(Backend):
    """Shared by the openai and litellm backends: OpenAI-style arguments in, `choices` out, with the
    fallback for servers that ignore `n`. Subclasses implement `_create(arguments)` only."""

    supports_n = True  # natively, or by fanning out itself when the server ignores `n`
    supports_tools = True
    supports_response_schema = True

    def __init__(self, model: str, *, endpoint: str, extra_body: dict[str, Any] | None = None) -> None:
        self.model_name = model
        self.endpoint = endpoint
        self.extra_body = dict(extra_body or {})
        #: what this endpoint accepts: from the model name, corrected by the server's refusals and first reply
        self.profile = profile_for(model, endpoint)
        #: index into RESPONSE_FORMATS of the form this server takes (raised on each refusal)
        self.format_level = RESPONSE_FORMATS.index(self.profile.first_response_format or RESPONSE_FORMATS[-1])
        self._warned: set[str] = set()
        self._replied = False

    @property
    def profile(self) -> ProviderProfile:
        return self._profile

    @profile.setter
    def profile(self, profile: ProviderProfile) -> None:
        # What the client and the agent ask of a backend follows the profile (a tool-less one gets text tools).
        self._profile = profile
        self.supports_tools = profile.tools
        self.supports_response_schema = profile.first_response_format is not None

    @property
    def ignores_n(self) -> bool:
        """Samples are fetched one request each: the profile has no `n`, or the server ignored or refused it."""
        return not self.profile.sends_n

    def remember(self, profile: ProviderProfile) -> None:
        """Start from a profile learned earlier for this endpoint (a resumed run), not from the model name."""
        self.profile = profile
        if profile.first_response_format is not None:
            self.format_level = RESPONSE_FORMATS.index(profile.first_response_format)

    @abc.abstractmethod
    async def _create(self, arguments: dict[str, Any]) -> Any:
        """Send one chat-completions call; raise typed errors."""

    async def forward(self, request: ChatRequest) -> list[Completion]:
        if request.n == 1 or not self.profile.sends_n:
            completions = await self._fan_out(request, first_sample=0, count=request.n)
        else:
            # a refusal of `n` (llama.cpp) is learned inside _call, which then asks for one sample
            completions = await self._call(request, n=request.n, sample=0)
            if len(completions) < request.n:
                if self.profile.sends_n:
                    self.profile = self.profile.learn("one request per sample (n ignored)", sends_n=False)
                missing = request.n - len(completions)
                completions += await self._fan_out(request, first_sample=len(completions), count=missing)
        return self._numbered(request, completions[: request.n])

    # -- internals ---------------------------------------------------------------------------------

    async def _fan_out(self, request: ChatRequest, *, first_sample: int, count: int) -> list[Completion]:
        """`count` single-sample requests in parallel, starting at position `first_sample` of the request."""
        calls = [self._call(request, n=1, sample=first_sample + k) for k in range(count)]
        results = await asyncio.gather(*calls)
        return [result[0] for result in results]

    @staticmethod
    def _numbered(request: ChatRequest, completions: list[Completion]) -> list[Completion]:
        for position, completion in enumerate(completions):
            completion.index = request.sample_offset + position
        return completions

    def _arguments(self, request: ChatRequest, *, n: int, sample: int) -> dict[str, Any]:
        """The call's body: only the parameters the profile says this endpoint takes."""
        sampling, profile = request.sampling, self.profile
        if request.tools and not profile.tools:
            raise BackendUnavailableError(
                f"{self.endpoint}: {profile.name} does not support tool calling ({profile.source}); "
                "use the text tool protocol (agent.protocol: text)"
            )
        arguments: dict[str, Any] = {
            "model": self.model_name,
            "messages": [message.to_wire() for message in request.messages],
            profile.token_limit_field: sampling.max_tokens,
        }
        values = {"temperature": sampling.temperature, "top_p": sampling.top_p}
        arguments.update({name: values[name] for name in profile.sampling_fields})
        unsent = [f"{name} {values[name]:g}" for name in values if name not in profile.sampling_fields]
        if unsent:
            self._warn_once("sampling", "%s: %s does not take %s: not sent", ", ".join(unsent))
        if n > 1 and profile.sends_n:
            arguments["n"] = n
        if sampling.stop:
            arguments["stop"] = list(sampling.stop)
        if sampling.seed is not None and profile.sends_seed:
            # seed + absolute sample index: a group fetched as n single calls (by us, or by the client
            # for a partly cached group) gets distinct samples, and the same ones on every rerun.
            arguments["seed"] = sampling.seed + request.sample_offset + sample
        elif sampling.seed is not None:
            self._warn_once("seed", "%s: %s does not take %s: not sent (reruns reproduce from the cache)", "seed")
        if request.tools:
            arguments["tools"] = request.tools
        if self.extra_body:
            arguments["extra_body"] = self.extra_body
        if request.response_schema is not None and profile.first_response_format is not None:
            arguments["response_format"] = response_format(
                request.response_schema, RESPONSE_FORMATS[self.format_level]
            )
        return arguments

    def _warn_once(self, topic: str, message: str, what: str) -> None:
        if topic not in self._warned:
            self._warned.add(topic)
            logger.warning(message, self.endpoint, self.profile.name, what)

    async def _call(self, request: ChatRequest, *, n: int, sample: int) -> list[Completion]:
        started = time.perf_counter()
        arguments = self._arguments(request, n=n, sample=sample)
        level = self.format_level  # this call's own: concurrent calls may be refused at the same time
        sent_with = self.profile
        while True:
            try:
                response = await self._create(arguments)
                break
            except (InvalidRequestError, ServerError) as exc:
                # a parameter rule learned from this refusal, or from a concurrent call's: ask again, corrected
                if self.profile is not sent_with or self._learned_from(exc):
                    sent_with = self.profile
                    arguments = self._arguments(request, n=n, sample=sample)
                    if request.response_schema is not None:
                        arguments["response_format"] = response_format(
                            request.response_schema, RESPONSE_FORMATS[level]
                        )
                    continue
                if request.response_schema is None or not refuses_response_format(exc):
                    raise
                if level + 1 >= len(RESPONSE_FORMATS):
                    raise InvalidRequestError(f"{self.endpoint} refused every response_format: {exc}") from exc
                level += 1
                arguments["response_format"] = response_format(request.response_schema, RESPONSE_FORMATS[level])
        if request.response_schema is not None and level > self.format_level:
            # remembered: later calls (and a resumed run) start at the form this server takes
            self.format_level = level
            form = RESPONSE_FORMATS[level]
            self.profile = self.profile.learn(f"response_format {form}", first_response_format=form)
        if not self._replied:
            self._replied = True
            self._recognise(response)
        latency = time.perf_counter() - started
        return self._parse(response, latency)

    def _recognise(self, response: Any) -> None:
        """Name a generic endpoint after the server its first reply shows (llama.cpp, vLLM)."""
        recognised = recognise_from_reply(self.profile, response)
        if recognised is None:
            return
        self.profile = recognised
        logger.info("%s answers like %s: %s", self.endpoint, recognised.name, recognised.describe())
        if recognised.name == VLLM.name and field(field(response, "usage"), "prompt_tokens_details") is None:
            logger.warning(
                "%s: vLLM reports cached prompt tokens only when started with --enable-prompt-tokens-details",
                self.endpoint,
            )

    def _learned_from(self, error: Exception) -> bool:
        """Whether `error` taught this endpoint's profile a rule (then the call is sent again, corrected)."""
        learned = learn_from_refusal(self.profile, error)
        if learned is None:
            return False
        logger.warning("%s refused a parameter; from now on: %s", self.endpoint, learned.describe())
        self.profile = learned
        return True

    def _parse(self, response: Any, latency: float) -> list[Completion]:
        """Completions of a reply: a raw JSON object (openai backend) or an SDK object (litellm's)."""
        choices = field(response, "choices")
        if not isinstance(choices, list) or not choices:
            raise MalformedResponseError(
                f"{self.endpoint} answered without choices (got {type(response).__name__}: {str(response)[:200]!r})"
            )
        usage, profile = field(response, "usage"), self.profile
        prompt_tokens = _int_or_zero(field(usage, "prompt_tokens"))
        completion_tokens = _int_or_zero(field(usage, "completion_tokens"))
        # the profile's documented field first; any other known place for a server that reports elsewhere
        cached = read_count(usage, profile.cached_tokens_field, field) or cached_prompt_tokens(usage)
        reasoned = read_count(usage, profile.reasoning_tokens_field, field) or reasoning_tokens(usage, field)
        shares = share_usage(prompt_tokens, completion_tokens, len(choices), cached, reasoned)
        completions = []
        for choice, share in zip(choices, shares, strict=True):
            message = field(choice, "message")
            if message is None:
                raise MalformedResponseError(f"{self.endpoint} answered with a choice without a message: {choice!r}")
            content = field(message, "content")
            if content is not None and not isinstance(content, str):
                raise MalformedResponseError(f"{self.endpoint} answered with non-text content: {content!r}")
            finish_reason = field(choice, "finish_reason")
            reasoning, answer = reasoning_of(
                message,
                content or "",
                field,
                fields=profile.reasoning_fields,
                think_in_content=profile.think_in_content,
            )
            completions.append(
                Completion(
                    text=answer,
                    reasoning=reasoning,
                    finish_reason=finish_reason if isinstance(finish_reason, str) else None,
                    tool_calls=_tool_calls(field(message, "tool_calls")),
                    usage=share,
                    latency_s=latency,
                )
            )
        return completions


class OpenAIBackend(ChatCompletionsBackend):
    """Chat completions through the `openai` SDK (`AsyncOpenAI`) against one base URL."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        extra_body: dict[str, Any] | None = None,
        transport: str = DEFAULT_TRANSPORT,
    ) -> None:
        if not model:
            raise BackendUnavailableError("the openai backend needs a model name (--model)")
        if transport not in TRANSPORTS:
            raise BackendUnavailableError(f"unknown HTTP transport {transport!r}: use one of {', '.join(TRANSPORTS)}")
        # The endpoint names this backend in logs, errors and state.json, so it shows the query string masked
        # (its credentials: core.secrets); the client sends the clear one.
        endpoint = mask_url((base_url or DEFAULT_BASE_URL).rstrip("/"))
        super().__init__(model, endpoint=endpoint, extra_body=extra_body)
        self.timeout_s = timeout_s
        self.transport = transport
        self._client = _make_client(base_url, api_key, timeout_s, transport)

    async def _create(self, arguments: dict[str, Any]) -> Any:
        import openai

        # The SDK's documented `client.post` for a raw request: the same transport, auth, timeouts and typed
        # errors as `chat.completions.create`, without its per-call walk of the arguments against the
        # params' TypedDicts and its model construction of the reply (together ~45% of the SDK's CPU per
        # call, benchmarks/transport.py). `cast_to=object` returns the reply's JSON as is; `_parse` reads it.
        body = dict(arguments)
        body.update(body.pop("extra_body", None) or {})
        try:
            return await self._client.post(
                "/chat/completions", body=body, cast_to=object, options={"security": CHAT_SECURITY}
            )
        except (openai.OpenAIError, ValueError) as exc:  # ValueError: a body that is not JSON
            raise map_openai_error(exc) from exc

    async def aclose(self) -> None:
        await self._client.close()


def _make_client(
    base_url: str | None, api_key: str | None, timeout_s: float, transport: str = DEFAULT_TRANSPORT
) -> Any:
    import openai

    # The SDK's own HTTP stacks, both maintained by it: httpx (its default) or aiohttp (`DefaultAioHttpClient`).
    def http_client() -> Any:
        return openai.DefaultAioHttpClient(timeout=timeout_s) if transport == "aiohttp" else None

    # The SDK appends its paths to base_url as text, so a query string in it would swallow them: it goes
    # in default_query instead (an Azure Functions `code`, a SAS signature).
    base_url, query = split_query(base_url) if base_url else (None, {})
    if query:  # the SDK's HTTP stack (httpx, or httpx2 in openai 3) logs each request's URL at INFO
        for http_logger in ("httpx", "httpx2"):
            mask_urls_logged_by(http_logger)
    try:
        # api_key=None lets the SDK read OPENAI_API_KEY, the usual place users keep it.
        return openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key,
            timeout=timeout_s,
            max_retries=0,
            http_client=http_client(),
            default_query=query or None,
        )
    except openai.OpenAIError as exc:
        if base_url is None:
            raise BackendUnavailableError(
                "no API key for api.openai.com: pass --api-key or set OPENAI_API_KEY "
                "(or point --base-url at a local OpenAI-compatible server)"
            ) from exc
        return openai.AsyncOpenAI(
            base_url=base_url,
            api_key=PLACEHOLDER_API_KEY,
            timeout=timeout_s,
            max_retries=0,
            http_client=http_client(),
            default_query=query or None,
        )


def response_format(schema: ResponseSchema, form: str = "json_schema") -> dict[str, Any]:
    """The `response_format` of a schema in one of RESPONSE_FORMATS."""
    if form == "json_schema":
        return {
            "type": "json_schema",
            "json_schema": {"name": schema.name, "schema": schema.json_schema, "strict": True},
        }
    if form == "json_object+schema":
        return {"type": "json_object", "schema": schema.json_schema}
    return {"type": "json_object"}


def refuses_response_format(error: Exception) -> bool:
    """A 400/422, or a 5xx whose message names response_format (llama-cpp-python's server answers 500)."""
    if isinstance(error, ContextWindowExceededError):
        return False
    return isinstance(error, InvalidRequestError) or "response_format" in str(error)


def _int_or_zero(value: Any) -> int:
    return value if isinstance(value, int) else 0


def _tool_calls(raw: Any) -> list[dict[str, Any]] | None:
    if not raw:
        return None
    calls = []
    for call in raw:
        if hasattr(call, "model_dump"):
            calls.append(call.model_dump(exclude_none=True))
        elif isinstance(call, dict):  # raw JSON: drop the nulls, as model_dump(exclude_none=True) does
            calls.append(_without_nulls(call))
        else:
            raise MalformedResponseError(f"unreadable tool call in reply: {call!r}")
    return calls


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_without_nulls(item) for item in value]
    return value


__all__ = ["DEFAULT_BASE_URL", "RESPONSE_FORMATS", "ChatCompletionsBackend", "OpenAIBackend", "response_format"]
