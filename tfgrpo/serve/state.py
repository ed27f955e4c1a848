"""What one `tfgrpo serve` process holds: its settings, the live library, the upstream, the trace store, the
client keys, and the observer (logs and metrics) they all report to."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from tfgrpo.core.config import secret_value
from tfgrpo.llm.client import LLMClient
from tfgrpo.llm.factory import build_client
from tfgrpo.serve.auth import ClientKeys
from tfgrpo.serve.config import ServeConfig
from tfgrpo.serve.deployment import Deployment
from tfgrpo.serve.live_deployment import LiveDeployment
from tfgrpo.serve.live_library import LiveLibrary
from tfgrpo.serve.llm_upstream import LLMUpstream
from tfgrpo.serve.metrics import ServeMetrics
from tfgrpo.serve.observe import Observer
from tfgrpo.serve.readiness import Readiness
from tfgrpo.serve.traces import TraceStore
from tfgrpo.serve.upstream import Upstream

API_KEY_ENV = "TFGRPO_UPSTREAM_API_KEY"


@dataclass
class ServeState:
    config: ServeConfig
    live: LiveLibrary
    upstream: Upstream | LLMUpstream
    traces: TraceStore
    observer: Observer
    readiness: Readiness
    client_keys: ClientKeys | None = None
    #: the champion and challenger served, when `deployment.enabled` (None: the library file alone serves)
    deployment: LiveDeployment | None = None
    #: what error messages must not show: the upstreams' host:port (internal addresses)
    hidden: list[str] = field(default_factory=list)

    @classmethod
    def build(
        cls,
        config: ServeConfig,
        llm_client: LLMClient | None = None,
        *,
        metrics_dir: Path | None = None,
        topk_index: bool = True,
    ) -> ServeState:
        """`llm_client` replaces the one an llm: upstream would build (tests pass a scripted backend's);
        `metrics_dir`: prometheus_client's multiprocess folder when several workers share the metrics;
        `topk_index` False: no top-k index even where the config keeps one (the runner's start-up probe)."""
        hidden = _internal_addresses(config)
        observer = Observer(ServeMetrics(multiprocess_dir=metrics_dir), access_log=config.access_log, hidden=hidden)
        client_keys = ClientKeys.load(config.client_keys) if config.client_keys else None
        if client_keys is not None and config.admin_keys is not None:
            client_keys = client_keys.with_admins(ClientKeys.load(config.admin_keys))
        live = LiveLibrary(
            config.library,
            store_dir=config.store_dir,
            topk_index=topk_index and config.keeps_topk_index,
            on_reload=lambda snapshot: observer.reloaded(
                snapshot.version, snapshot.content_hash, len(snapshot.library)
            ),
            on_reload_error=observer.reload_failed,
        )
        observer.serving(live.current.version, live.current.content_hash)
        upstream = _upstream(config, llm_client, observer)
        traces = TraceStore(config.traces, on_drop=observer.trace_dropped)
        deployment = None
        if config.deployment.enabled:  # the file seeds the champion on the store's first start only
            deployment = LiveDeployment(Deployment(traces.engine), live, source=f"file {config.library}")
        return cls(
            config=config,
            live=live,
            upstream=upstream,
            traces=traces,
            observer=observer,
            readiness=Readiness(upstream, traces, timeout_s=config.ready_timeout_s),
            client_keys=client_keys,
            deployment=deployment,
            hidden=hidden,
        )

    def close(self) -> None:
        """Release what `build` opened without serving (the trace store's connections)."""
        self.traces.close()


def _upstream(config: ServeConfig, llm_client: LLMClient | None, observer: Observer) -> Upstream | LLMUpstream:
    # forward_client_auth_header: each client's own key goes upstream, never the server's (not even from the environment)
    api_key = (
        None if config.forward_client_auth_header else secret_value(config.api_key) or os.environ.get(API_KEY_ENV)
    )
    if config.llm_spec is not None:
        return LLMUpstream(
            llm_client or build_client(config.llm_config(api_key)),
            config.llm_spec,
            max_reply_bytes=config.max_reply_bytes,
        )
    return Upstream(
        config.upstream,
        api_key=api_key,
        timeout_s=config.timeout_s,
        max_retries=config.max_retries,
        backoff_s=config.backoff_s,
        on_retry=observer.upstream_retry,
        max_reply_bytes=config.max_reply_bytes,
        max_error_bytes=config.max_error_bytes,
    )


def _internal_addresses(config: ServeConfig) -> list[str]:
    urls = [url for url in config.upstream if "://" in url]
    urls += [str(url) for url in (config.llm.base_url if config.llm else [])]
    return sorted({urlsplit(url).netloc for url in urls} - {""}, key=len, reverse=True)
