"""In-process llama.cpp (llama-cpp-python) on a GGUF file; default: the embedded SmolLM2 GGUF.

A `Llama` object is not thread-safe, so each copy of the model decodes one request at a time, in a worker
thread so the event loop stays free. llama.cpp has no `n`: samples are drawn one after another (the sample
with absolute index i = sample_offset + k uses `seed + i` when a seed is set, else a fresh random seed; a greedy
request is decoded once and copied).

`instances` > 1 loads that many copies (the GGUF weights are memory-mapped, so shared; each copy has its
own KV cache) and decodes on them in parallel, one CPU thread each: a small model decodes on one thread
about as fast as on several (llama.cpp's threads wait for each other at every layer), so on a 2-core
machine two copies decode 1.5-1.8x the tokens per second of one. A request's samples are split into one
contiguous run per copy, so each copy reuses its prompt's KV cache from one sample to the next.

Install with `CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install "tfgrpo[llamacpp]"`: the default native build
crashes on some CPUs (AMX) for prompts longer than one token.

A request's `response_schema` becomes llama-cpp-python's `response_format={"type": "json_object",
"schema": ...}`, which it compiles to a GBNF grammar (its JSON-schema-to-grammar converter).
"""

from __future__ import annotations

import asyncio
import queue
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
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

#: llama-cpp-python silences a model load by pointing the process's stdout/stderr at /dev/null and back;
#: two loads at once in two threads can restore each other's /dev/null and silence the process for good.
#: Process-wide because the file descriptors are.
_LOADING = threading.Lock()


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
        instances: int = 1,
        verbose: bool = False,
    ) -> None:
        if instances < 1:
            raise ValueError("instances must be at least 1")
        self.model_path = model
        self.adapter = adapter
        # "@llamacpp": a GGUF decoded by llama.cpp does not answer exactly like transformers on the same
        # weights, so the two must not share cache entries.
        base_name = EMBEDDED_MODEL_NAME if model is None else model
        self.model_name = f"{base_name}@llamacpp" + (f"+lora:{Path(adapter).resolve()}" if adapter else "")
        self.endpoint = f"llamacpp:{self.model_name}"
        self.n_ctx = n_ctx
        # Several copies decode in parallel only if each keeps to one thread (they would wait on each other).
        self.n_threads = n_threads if n_threads is not None or instances == 1 else 1
        self.instances = instances
        self.verbose = verbose
        # A copy is taken from `_idle` for one run of samples and put back after; None = not loaded yet.
        self._idle: queue.SimpleQueue[Any] = queue.SimpleQueue()
        for _ in range(instances):
            self._idle.put(None)
        self._workers: ThreadPoolExecutor | None = None
        self._unseeded = random.Random()

    async def forward(self, request: ChatRequest) -> list[Completion]:
        draws = 1 if request.sampling.temperature == 0.0 else request.n
        if self._workers is None:
            self._workers = ThreadPoolExecutor(max_workers=self.instances, thread_name_prefix="llamacpp")
        runs = _contiguous_runs(self._seeds(request, draws), self.instances)
        loop = asyncio.get_running_loop()
        workers = self._workers
        parts = await asyncio.gather(*(loop.run_in_executor(workers, self._draw_run, request, run) for run in runs))
        replies = [reply for part in parts for reply in part]
        completions = [self._completion(response, latency) for response, latency in replies]
        if draws == 1 and request.n > 1:  # greedy: one decode, copied
            first = completions[0].usage
            shares = share_usage(first.prompt_tokens, first.completion_tokens, request.n, first.cached_prompt_tokens)
            completions = [completions[0].model_copy(update={"usage": share}) for share in shares]
        for k, completion in enumerate(completions):
            completion.index = request.sample_offset + k
        return completions

    def _seeds(self, request: ChatRequest, draws: int) -> list[int]:
        """One seed per sample: `seed + index` when the request sets one. Else fresh ones, because each copy
        of the model would otherwise derive its next seed from its own last one, and copies that have done
        the same number of draws would repeat each other's samples."""
        seed = request.sampling.seed
        if seed is None:
            return [self._unseeded.randrange(2**32) for _ in range(draws)]
        return [seed + request.sample_offset + k for k in range(draws)]

    async def aclose(self) -> None:
        """Wait for the decodes under way, then free every copy (a later request loads them again)."""
        workers, self._workers = self._workers, None
        if workers is not None:
            await asyncio.to_thread(workers.shutdown, wait=True)
        for _ in range(self.instances):
            llama = self._idle.get()
            if llama is not None:
                llama.close()
            self._idle.put(None)

    def load(self) -> None:
        """Load one copy now (the others load on first use)."""
        llama = self._idle.get()
        try:
            llama = self._ensure_loaded(llama)
        finally:
            self._idle.put(llama)

    # -- worker threads ----------------------------------------------------------------------------

    def _ensure_loaded(self, llama: Any) -> Any:
        if llama is not None:
            return llama
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
            with _LOADING:
                llama = llama_cpp.Llama(model_path=str(path), **options)
        except ValueError as exc:  # llama-cpp-python reports load failures as ValueError
            raise BackendUnavailableError(f"llama.cpp could not load {path}: {exc}") from exc
        return llama

    def _draw_run(self, request: ChatRequest, seeds: list[int]) -> list[tuple[Any, float]]:
        """One sample per seed on one idle copy of the model."""
        llama = self._idle.get()
        try:
            llama = self._ensure_loaded(llama)
            return self._draw(llama, request, seeds)
        finally:
            self._idle.put(llama)

    @staticmethod
    def _draw(llama: Any, request: ChatRequest, seeds: list[int]) -> list[tuple[Any, float]]:
        sampling = request.sampling
        messages = [message.to_wire() for message in request.messages]
        schema = request.response_schema
        structured = {"response_format": {"type": "json_object", "schema": schema.json_schema}} if schema else {}
        replies = []
        for seed in seeds:
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
                    seed=seed,
                    **structured,
                )
            except ValueError as exc:
                if is_context_window_message(str(exc)):
                    raise ContextWindowExceededError(str(exc)) from exc
                raise PermanentError(f"llama.cpp rejected the request: {exc}") from exc
            replies.append((response, time.perf_counter() - started))
        return replies

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


def _contiguous_runs(seeds: list[int], instances: int) -> list[list[int]]:
    """The samples' seeds, in order, as at most `instances` contiguous runs of near-equal length."""
    runs = min(len(seeds), instances)
    bounds = [round(len(seeds) * i / runs) for i in range(runs + 1)]
    return [seeds[bounds[i] : bounds[i + 1]] for i in range(runs)]


__all__ = ["LlamaCppBackend"]
