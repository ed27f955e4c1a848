"""In-process llama.cpp (llama-cpp-python) on a GGUF file; default: the embedded SmolLM2 GGUF.

A `Llama` object is not thread-safe, so calls run one at a time under a lock, in a worker thread so the
event loop stays free. llama.cpp has no `n`: samples are drawn one after another (the sample with
absolute index i = sample_offset + k uses `seed + i` when a seed is set; a greedy request is decoded
once and copied).

Install with `CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install "tfgrpo[llamacpp]"`: the default native build
crashes on some CPUs (AMX) for prompts longer than one token.

A request's `response_schema` becomes llama-cpp-python's `response_format={"type": "json_object",
"schema": ...}`, which it compiles to a GBNF grammar (its JSON-schema-to-grammar converter).
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

from tfgrpo.llm.backends.errors_map import is_context_window_message
from tfgrpo.llm.backends.usage import cached_prompt_tokens, share_usage
from tfgrpo.llm.base import Backend
from tfgrpo.llm.embedded import EMBEDDED_MODEL_NAME, embedded_gguf_path
from tfgrpo.llm.errors import (
    BackendUnavailableError,
    ContextWindowExceededError,
    MalformedResponseError,
    PermanentError,
)
from tfgrpo.llm.types import ChatRequest, Completion, Usage

INSTALL_HINT = 'CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install "tfgrpo[llamacpp]"'


class LlamaCppBackend(Backend):
    """`llama_cpp.Llama.create_chat_completion` on one GGUF model."""

    supports_n = True  # samples drawn one after another inside `forward`
    supports_tools = False
    supports_response_schema = True

    def __init__(
        self,
        model: str | None = None,
        *,
        adapter: str | None = None,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        verbose: bool = False,
    ) -> None:
        self.model_path = model
        self.adapter = adapter
        # "@llamacpp": a GGUF decoded by llama.cpp does not answer exactly like transformers on the same
        # weights, so the two must not share cache entries.
        base_name = EMBEDDED_MODEL_NAME if model is None else model
        self.model_name = f"{base_name}@llamacpp" + (f"+lora:{Path(adapter).resolve()}" if adapter else "")
        self.endpoint = f"llamacpp:{self.model_name}"
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.verbose = verbose
        self._lock = threading.Lock()
        self._llama: Any = None

    async def forward(self, request: ChatRequest) -> list[Completion]:
        return await asyncio.to_thread(self._complete, request)

    async def aclose(self) -> None:
        with self._lock:
            llama, self._llama = self._llama, None
        if llama is not None:
            llama.close()

    def load(self) -> None:
        with self._lock:
            self._ensure_loaded()

    # -- worker thread -----------------------------------------------------------------------------

    def _ensure_loaded(self) -> Any:
        if self._llama is None:
            try:
                import llama_cpp
            except ImportError as exc:
                raise BackendUnavailableError(f"the llamacpp backend needs llama-cpp-python: {INSTALL_HINT}") from exc
            path = embedded_gguf_path() if self.model_path is None else Path(self.model_path)
            if not path.is_file():
                raise BackendUnavailableError(f"GGUF file not found: {path}")
            options: dict[str, Any] = {"n_ctx": self.n_ctx, "verbose": self.verbose}
            if self.n_threads is not None:
                options.update(n_threads=self.n_threads, n_threads_batch=self.n_threads)
            if self.adapter:
                options["lora_path"] = self.adapter
            try:
                self._llama = llama_cpp.Llama(model_path=str(path), **options)
            except ValueError as exc:  # llama-cpp-python reports load failures as ValueError
                raise BackendUnavailableError(f"llama.cpp could not load {path}: {exc}") from exc
        return self._llama

    def _complete(self, request: ChatRequest) -> list[Completion]:
        sampling = request.sampling
        greedy = sampling.temperature == 0.0
        draws = 1 if greedy else request.n
        messages = [message.to_wire() for message in request.messages]
        schema = request.response_schema
        structured = {"response_format": {"type": "json_object", "schema": schema.json_schema}} if schema else {}
        replies = []
        with self._lock:
            llama = self._ensure_loaded()
            for k in range(draws):
                started = time.perf_counter()
                try:
                    response = llama.create_chat_completion(
                        messages=messages,
                        temperature=sampling.temperature,
                        top_p=sampling.top_p,
                        top_k=0,  # OpenAI semantics: no top-k cut (llama.cpp defaults to 40)
                        min_p=0.0,
                        max_tokens=sampling.max_tokens,
                        stop=list(sampling.stop) if sampling.stop else None,
                        seed=None if sampling.seed is None else sampling.seed + request.sample_offset + k,
                        **structured,
                    )
                except ValueError as exc:
                    if is_context_window_message(str(exc)):
                        raise ContextWindowExceededError(str(exc)) from exc
                    raise PermanentError(f"llama.cpp rejected the request: {exc}") from exc
                replies.append((response, time.perf_counter() - started))
        completions = [self._completion(response, latency) for response, latency in replies]
        if greedy and request.n > 1:
            first = completions[0].usage
            shares = share_usage(first.prompt_tokens, first.completion_tokens, request.n, first.cached_prompt_tokens)
            completions = [completions[0].model_copy(update={"usage": share}) for share in shares]
        for k, completion in enumerate(completions):
            completion.index = request.sample_offset + k
        return completions

    @staticmethod
    def _completion(response: Any, latency: float) -> Completion:
        try:
            choice = response["choices"][0]
            usage = response.get("usage") or {}
            return Completion(
                text=choice["message"].get("content") or "",
                finish_reason=choice.get("finish_reason"),
                usage=Usage(
                    prompt_tokens=int(usage.get("prompt_tokens", 0)),
                    completion_tokens=int(usage.get("completion_tokens", 0)),
                    cached_prompt_tokens=cached_prompt_tokens(usage),
                ),
                latency_s=latency,
            )
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise MalformedResponseError(f"unexpected reply from llama.cpp: {str(response)[:200]}") from exc


__all__ = ["LlamaCppBackend"]
