"""Build the configured backend(s) and wrap them in one `LLMClient` (the `get_provider()` of open-r1)."""

from __future__ import annotations

import os
from pathlib import Path

from tfgrpo.core.config import secret_value
from tfgrpo.llm.accounting import context_window, resolve_pricing
from tfgrpo.llm.base import Backend
from tfgrpo.llm.cache import ResponseCache
from tfgrpo.llm.client import LLMClient
from tfgrpo.llm.config import LLMConfig
from tfgrpo.llm.errors import BackendUnavailableError

LOCAL_BACKENDS = {"transformers", "llamacpp", "vllm"}


def default_cache_dir() -> Path:
    """The user cache folder (dequantised embedded model, chat cache); TFGRPO_CACHE_DIR overrides."""
    root = os.environ.get("TFGRPO_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"), "tfgrpo"
    )
    return Path(root)


def build_backends(config: LLMConfig, *, cache_dir: Path | None = None) -> list[Backend]:
    """The configured backend(s). Each backend's module is imported only when it is the one chosen: a run
    pays (at start-up, before its first request) for its own adapter, not for the other four."""
    cache_dir = cache_dir or default_cache_dir()
    if config.backend == "transformers":
        from tfgrpo.llm.backends.transformers_backend import TransformersBackend

        return [
            TransformersBackend(
                model=config.model,
                adapter=config.adapter,
                batch_size=config.batch_size,
                dtype=config.dtype,
                cache_dir=cache_dir,
            )
        ]
    if config.backend == "llamacpp":
        from tfgrpo.llm.backends.llamacpp_backend import LlamaCppBackend

        return [LlamaCppBackend(model=config.model, adapter=config.adapter, instances=config.llamacpp_instances)]
    if config.backend == "vllm":
        from tfgrpo.llm.backends.vllm_backend import VLLMBackend

        return [VLLMBackend(model=config.model, adapter=config.adapter, cache_dir=cache_dir)]
    if not config.model:
        raise BackendUnavailableError(
            f"--model is required with --backend {config.backend} (e.g. gpt-4o-mini, deepseek-chat)"
        )
    if config.backend == "openai":
        from tfgrpo.llm.backends.openai_backend import OpenAIBackend

        urls: list[str | None] = [*config.base_url] or [None]
        return [
            OpenAIBackend(
                model=config.model, base_url=url, api_key=secret_value(config.api_key), timeout_s=config.timeout_s
            )
            for url in urls
        ]
    if config.backend == "litellm":
        from tfgrpo.llm.backends.litellm_backend import LiteLLMBackend

        urls = [*config.base_url] or [None]
        return [
            LiteLLMBackend(
                model=config.model, api_base=url, api_key=secret_value(config.api_key), timeout_s=config.timeout_s
            )
            for url in urls
        ]
    raise BackendUnavailableError(f"unknown backend {config.backend!r}")


def build_client(
    config: LLMConfig,
    *,
    cache_path: str | Path | None = None,
    cache_dir: Path | None = None,
    backends: list[Backend] | None = None,
) -> LLMClient:
    """`cache_path` (else `config.cache`) names the SQLite response cache; neither means no cache.

    `backends` replaces the configured ones (tests and benchmarks pass a ScriptedBackend).
    """
    path = config.cache or cache_path
    cache = ResponseCache(path) if path else None
    backends = backends or build_backends(config, cache_dir=cache_dir)
    pricing = resolve_pricing(
        config.model,
        config.price_input_per_1m,
        config.price_output_per_1m,
        local=config.backend in LOCAL_BACKENDS,
        cached_input_per_1m=config.price_cached_input_per_1m,
    )
    return LLMClient(
        backends,
        cache=cache,
        concurrency=config.concurrency,
        max_retries=config.max_retries,
        timeout_s=config.timeout_s,
        pricing=pricing,
        budget_usd=config.budget_usd,
        # API models: litellm's table knows the window; local backends check with their own tokenizer
        context_tokens=None if config.backend in LOCAL_BACKENDS else context_window(config.model),
        structured_output=config.structured_output,
    )
