"""What one `tfgrpo serve` process holds: its settings, the live library, the upstream and the trace store."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from tfgrpo.core.config import secret_value
from tfgrpo.llm.client import LLMClient
from tfgrpo.llm.factory import build_client
from tfgrpo.serve.config import ServeConfig
from tfgrpo.serve.live_library import LiveLibrary
from tfgrpo.serve.llm_upstream import LLMUpstream
from tfgrpo.serve.traces import TraceStore
from tfgrpo.serve.upstream import Upstream

API_KEY_ENV = "TFGRPO_UPSTREAM_API_KEY"


@dataclass
class ServeState:
    config: ServeConfig
    live: LiveLibrary
    upstream: Upstream | LLMUpstream
    traces: TraceStore
    #: what error messages must not show: the upstreams' host:port (internal addresses)
    hidden: list[str] = field(default_factory=list)

    @classmethod
    def build(cls, config: ServeConfig, llm_client: LLMClient | None = None) -> ServeState:
        """`llm_client` replaces the one an llm: upstream would build (tests pass a scripted backend's)."""
        return cls(
            config=config,
            live=LiveLibrary(config.library, store_dir=config.store_dir),
            upstream=_upstream(config, llm_client),
            traces=TraceStore(config.traces),
            hidden=_internal_addresses(config),
        )


def _upstream(config: ServeConfig, llm_client: LLMClient | None) -> Upstream | LLMUpstream:
    api_key = secret_value(config.api_key) or os.environ.get(API_KEY_ENV)
    if config.llm_spec is not None:
        return LLMUpstream(llm_client or build_client(config.llm_config(api_key)), config.llm_spec)
    return Upstream(
        config.upstream,
        api_key=api_key,
        timeout_s=config.timeout_s,
        max_retries=config.max_retries,
        backoff_s=config.backoff_s,
    )


def _internal_addresses(config: ServeConfig) -> list[str]:
    urls = [url for url in config.upstream if "://" in url]
    urls += [str(url) for url in (config.llm.base_url if config.llm else [])]
    return sorted({urlsplit(url).netloc for url in urls} - {""}, key=len, reverse=True)
