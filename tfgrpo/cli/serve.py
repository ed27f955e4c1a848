"""`tfgrpo serve`: a learned library behind an OpenAI-compatible endpoint (thin over `tfgrpo.serve.app`)."""

from __future__ import annotations

from typing import Any

import typer

from tfgrpo.cli import options as opt
from tfgrpo.core.config import ConfigError, build_config
from tfgrpo.core.secrets import mask_url
from tfgrpo.serve.config import ServeConfig

FLAGS = [
    opt.flag(name)
    for name in (
        "library",
        "upstream",
        "port",
        "host",
        "model",
        "api_key",
        "inject",
        "store_dir",
        "holdout",
        "arm_key_header",
        "traces",
        "reward",
        "reward_min",
        "reward_max",
        "timeout_s",
        "max_retries",
        "reload_interval_s",
    )
]


def register(app: typer.Typer) -> None:
    @app.command("serve")
    @opt.config_options(ServeConfig, FLAGS)
    def serve_command(overrides: dict[str, Any], config: opt.ConfigOpt = None) -> None:
        """Serve a library as an OpenAI-compatible endpoint: injection, A/B holdout, traces, feedback, hot reload."""
        from rich.console import Console

        if config is None and (overrides["library"] is None or not overrides["upstream"]):
            raise ConfigError("--library and --upstream are required (or --config serve.yaml)")
        settings = build_config(ServeConfig, config, overrides)
        try:
            import uvicorn

            from tfgrpo.serve.app import create_app
        except ImportError as exc:
            raise ConfigError(
                f"serving needs FastAPI and uvicorn: pip install 'tfgrpo[serve]' ({exc.name} is missing)"
            ) from None
        server_app = create_app(settings)
        state = server_app.state.serve
        Console(stderr=True, soft_wrap=True).print(
            f"serving library v{state.live.current.version} ({len(state.live.current.library)} experiences) "
            f"on http://{settings.host}:{settings.port}/v1 -> {', '.join(settings.upstream)}; "
            f"traces: {mask_url(settings.traces)}",
            highlight=False,
        )
        uvicorn.run(
            server_app,
            host=settings.host,
            port=settings.port,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=30,
            proxy_headers=False,  # nothing reads the client address: its middleware was ~2% of CPU per request
        )
