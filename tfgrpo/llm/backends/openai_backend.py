"""Any OpenAI-compatible server (OpenAI, vLLM `vllm serve`, DeepSeek, llama.cpp server, Ollama, ...).

One backend instance per base URL: its `endpoint` is the URL, so the client layer can route across
replicas and bound concurrency per server. Nothing here retries: the client layer retries once, for
every backend, from the typed errors raised here.

Servers that ignore `n` (llama.cpp's server, some proxies) answer with fewer choices than asked. The
first time that happens the backend remembers it for this endpoint and from then on sends `n` parallel
single-sample requests instead. When a `seed` is set, a call whose first sample has absolute index `i`
(`sample_offset` + position) is sent with `seed + i`, so samples fetched one by one differ from each
other but stay reproducible.

Transport: the chat-completions POST goes over one keep-alive `aiohttp` session (the transport the
`openai` SDK itself offers as its `openai[aiohttp]` extra) and the JSON reply is read as plain dicts;
the key, base URL, organisation and project come from the arguments or the SDK's own variables
(`OPENAI_API_KEY`, `OPENAI_BASE_URL`, `OPENAI_ORG_ID`, `OPENAI_PROJECT_ID`). Measured on 2 CPU cores
against a local server (benchmarks/engine.py), the SDK's `create` costs ~2 ms of CPU per request
(httpx2, its request and response models), aiohttp + `json` ~0.2 ms; at 64 requests in flight that
difference kept a learn epoch at 3-5x its critical path. Not importing the SDK also saves ~0.6 s of
start-up and halves the heap every full garbage collection walks. HTTP failures map to the typed errors
through `errors_map.map_status_error`, as the SDK's exceptions did.
"""

from __future__ import annotations

import abc
import asyncio
import json
import os
import time
from typing import Any

from tfgrpo.llm.backends.errors_map import map_status_error
from tfgrpo.llm.backends.usage import share_usage
from tfgrpo.llm.base import Backend
from tfgrpo.llm.errors import (
    BackendUnavailableError,
    ConnectionFailedError,
    MalformedResponseError,
    PermanentError,
    RequestTimeoutError,
)
from tfgrpo.llm.types import ChatRequest, Completion

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Local servers accept any key; the SDK insists on one.
PLACEHOLDER_API_KEY = "EMPTY"


class ChatCompletionsBackend(Backend):
    """Shared by the openai and litellm backends: OpenAI-style arguments in, `choices` out, with the
    fallback for servers that ignore `n`. Subclasses implement `_create(arguments)` only."""

    supports_n = True  # natively, or by fanning out itself when the server ignores `n`
    supports_tools = True

    def __init__(self, model: str, *, endpoint: str, extra_body: dict[str, Any] | None = None) -> None:
        self.model_name = model
        self.endpoint = endpoint
        self.extra_body = dict(extra_body or {})
        #: learned on first contact: the server returned fewer choices than `n` asked for
        self.ignores_n = False

    @abc.abstractmethod
    async def _create(self, arguments: dict[str, Any]) -> Any:
        """Send one chat-completions call; raise typed errors."""

    async def forward(self, request: ChatRequest) -> list[Completion]:
        if request.n == 1 or self.ignores_n:
            completions = await self._fan_out(request, first_sample=0, count=request.n)
        else:
            completions = await self._call(request, n=request.n, sample=0)
            if len(completions) < request.n:
                self.ignores_n = True
                missing = request.n - len(completions)
                completions += await self._fan_out(request, first_sample=len(completions), count=missing)
        return self._numbered(request, completions[: request.n])

    # -- internals ---------------------------------------------------------------------------------

    async def _fan_out(self, request: ChatRequest, *, first_sample: int, count: int) -> list[Completion]:
        """`count` single-sample requests in parallel, starting at position `first_sample` of the request."""
        if count == 1:  # the usual case (one call per rollout): no task for gather to create
            return await self._call(request, n=1, sample=first_sample)
        calls = [self._call(request, n=1, sample=first_sample + k) for k in range(count)]
        results = await asyncio.gather(*calls)
        return [result[0] for result in results]

    @staticmethod
    def _numbered(request: ChatRequest, completions: list[Completion]) -> list[Completion]:
        for position, completion in enumerate(completions):
            completion.index = request.sample_offset + position
        return completions

    def _arguments(self, request: ChatRequest, *, n: int, sample: int) -> dict[str, Any]:
        sampling = request.sampling
        arguments: dict[str, Any] = {
            "model": self.model_name,
            "messages": [message.to_wire() for message in request.messages],
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
        }
        if n > 1:
            arguments["n"] = n
        if sampling.stop:
            arguments["stop"] = list(sampling.stop)
        if sampling.seed is not None:
            # seed + absolute sample index: a group fetched as n single calls (by us, or by the client
            # for a partly cached group) gets distinct samples, and the same ones on every rerun.
            arguments["seed"] = sampling.seed + request.sample_offset + sample
        if request.tools:
            arguments["tools"] = request.tools
        if self.extra_body:
            arguments["extra_body"] = self.extra_body
        return arguments

    async def _call(self, request: ChatRequest, *, n: int, sample: int) -> list[Completion]:
        started = time.perf_counter()
        response = await self._create(self._arguments(request, n=n, sample=sample))
        latency = time.perf_counter() - started
        return self._parse(response, latency)

    def _parse(self, response: Any, latency: float) -> list[Completion]:
        """Completions from a reply: SDK objects (litellm) or the decoded JSON body (openai backend)."""
        choices = _field(response, "choices")
        if not isinstance(choices, list) or not choices:
            raise MalformedResponseError(
                f"{self.endpoint} answered without choices (got {type(response).__name__}: {str(response)[:200]!r})"
            )
        usage = _field(response, "usage")
        prompt_tokens = _int_or_zero(_field(usage, "prompt_tokens"))
        completion_tokens = _int_or_zero(_field(usage, "completion_tokens"))
        shares = share_usage(prompt_tokens, completion_tokens, len(choices))
        completions = []
        for choice, share in zip(choices, shares, strict=True):
            message = _field(choice, "message")
            if message is None:
                raise MalformedResponseError(f"{self.endpoint} answered with a choice without a message: {choice!r}")
            content = _field(message, "content")
            if content is not None and not isinstance(content, str):
                raise MalformedResponseError(f"{self.endpoint} answered with non-text content: {content!r}")
            completions.append(
                Completion(
                    text=content or "",
                    finish_reason=_field(choice, "finish_reason"),
                    tool_calls=_tool_calls(_field(message, "tool_calls")),
                    usage=share,
                    latency_s=latency,
                )
            )
        return completions


class OpenAIBackend(ChatCompletionsBackend):
    """Chat completions against one OpenAI-compatible base URL, over one aiohttp keep-alive session."""

    #: the SDK's default pool size (max_connections); the client layer bounds what is in flight
    max_connections = 1000

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        if not model:
            raise BackendUnavailableError("the openai backend needs a model name (--model)")
        try:
            import aiohttp  # noqa: F401 - a dependency of litellm, always installed with tfgrpo
        except ImportError as exc:
            raise BackendUnavailableError("the openai backend needs aiohttp: pip install aiohttp") from exc
        super().__init__(model, endpoint=(base_url or DEFAULT_BASE_URL).rstrip("/"), extra_body=extra_body)
        self.timeout_s = timeout_s
        root = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        self._url = root + "/chat/completions"
        self._headers = _request_headers(_api_key(api_key, base_url))
        self._session: Any = None  # aiohttp.ClientSession, opened in the event loop that first sends
        self._session_loop: asyncio.AbstractEventLoop | None = None

    async def _create(self, arguments: dict[str, Any]) -> Any:
        import aiohttp

        body = dict(arguments)
        body.update(body.pop("extra_body", None) or {})  # merged into the body, as the SDK does
        try:
            async with self._http().post(self._url, data=json.dumps(body), headers=self._headers) as response:
                status = response.status
                raw = await response.read()
                headers = response.headers
        except TimeoutError as exc:  # aiohttp's ServerTimeoutError is one too
            raise RequestTimeoutError(f"request timed out: no reply from {self.endpoint} within {self.timeout_s:g}s") from exc
        except aiohttp.InvalidURL as exc:
            raise PermanentError(f"invalid base URL {self.endpoint!r}: {exc}") from exc
        except aiohttp.ClientError as exc:  # refused, reset, DNS, a truncated body
            raise ConnectionFailedError(f"could not reach the server: {type(exc).__name__}: {exc}") from exc
        if status >= 400:
            raise map_status_error(status, _error_message(raw, response.reason), headers)
        try:
            return json.loads(raw)
        except ValueError as exc:  # not JSON, or not UTF-8
            raise MalformedResponseError(f"the server's reply could not be parsed: {exc}: {raw[:200]!r}") from exc

    def _http(self) -> Any:
        """The aiohttp session of the running event loop (a session cannot move between loops)."""
        import aiohttp

        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._session_loop is not loop:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.max_connections, ssl=_ssl_context(self._url)),
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                # HTTP(S)_PROXY / NO_PROXY are honoured (as by the SDK's httpx client), but looked up
                # once here: aiohttp's trust_env looks them (and ~/.netrc) up in a thread per request.
                proxy=_env_proxy(self._url),
            )
            self._session_loop = loop
        return self._session

    async def aclose(self) -> None:
        """Close the connections; a later call opens a new session."""
        session, self._session, self._session_loop = self._session, None, None
        if session is not None and not session.closed:
            await session.close()


def _api_key(api_key: str | None, base_url: str | None) -> str:
    """The key given, else OPENAI_API_KEY; local servers (a base URL) accept any key."""
    if api_key is None:
        api_key = os.environ.get("OPENAI_API_KEY")
    if api_key is not None:
        return api_key
    if base_url is None:
        raise BackendUnavailableError(
            "no API key for api.openai.com: pass --api-key or set OPENAI_API_KEY "
            "(or point --base-url at a local OpenAI-compatible server)"
        )
    return PLACEHOLDER_API_KEY


def _request_headers(api_key: str) -> dict[str, str]:
    """What the SDK sends with a static key: bearer auth, JSON, organisation and project when set."""
    headers = {
        "Authorization": f"Bearer {api_key}",
        "Content-Type": "application/json",
        "Accept": "application/json",
        "User-Agent": "tfgrpo (OpenAI-compatible chat completions; aiohttp)",
    }
    if os.environ.get("OPENAI_ORG_ID"):
        headers["OpenAI-Organization"] = os.environ["OPENAI_ORG_ID"]
    if os.environ.get("OPENAI_PROJECT_ID"):
        headers["OpenAI-Project"] = os.environ["OPENAI_PROJECT_ID"]
    return headers


def _ssl_context(url: str) -> Any:
    """Certificates as the SDK's httpx client verifies them: SSL_CERT_FILE / SSL_CERT_DIR when set, else
    certifi's bundle (so HTTPS works where the system store is missing); True (aiohttp's default) for http."""
    if not url.startswith("https:"):
        return True
    import ssl

    if os.environ.get("SSL_CERT_FILE") or os.environ.get("SSL_CERT_DIR"):
        return ssl.create_default_context()
    try:
        import certifi
    except ImportError:
        return ssl.create_default_context()
    return ssl.create_default_context(cafile=certifi.where())


def _env_proxy(url: str) -> str | None:
    """The proxy the environment names for `url` (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, NO_PROXY)."""
    from urllib.parse import urlsplit
    from urllib.request import getproxies, proxy_bypass

    parts = urlsplit(url)
    if parts.hostname and proxy_bypass(parts.hostname):
        return None
    proxies = getproxies()
    return proxies.get(parts.scheme) or proxies.get("all")


def _error_message(raw: bytes, reason: str | None) -> str:
    """The server's own message when the error body carries one (`{"error": {"message": ...}}`)."""
    text = raw.decode("utf-8", errors="replace").strip()
    try:
        body = json.loads(text)
    except ValueError:
        return text[:1000] or (reason or "")
    inner = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(inner, dict) and isinstance(inner.get("message"), str):
        return inner["message"]
    if isinstance(inner, str):
        return inner
    return text[:1000]


def _field(obj: Any, name: str) -> Any:
    """`obj[name]` of a decoded JSON object, `obj.name` of an SDK object, None when absent."""
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def _without_none(value: Any) -> Any:
    # A raw tool call looks exactly like the SDK's `model_dump(exclude_none=True)` of it.
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value


def _int_or_zero(value: Any) -> int:
    return value if isinstance(value, int) else 0


def _tool_calls(raw: Any) -> list[dict[str, Any]] | None:
    if not raw:
        return None
    calls = []
    for call in raw:
        if hasattr(call, "model_dump"):
            calls.append(call.model_dump(exclude_none=True))
        elif isinstance(call, dict):
            calls.append(_without_none(call))
        else:
            raise MalformedResponseError(f"unreadable tool call in reply: {call!r}")
    return calls


__all__ = ["DEFAULT_BASE_URL", "ChatCompletionsBackend", "OpenAIBackend"]
