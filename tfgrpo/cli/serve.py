"""`tfgrpo serve`: a learned library behind an OpenAI-compatible endpoint (thin over `tfgrpo.serve.runner`)."""

from __future__ import annotations

from typing import Any

import typer

from tfgrpo.cli import options as opt
from tfgrpo.cli.lazy import listed
from tfgrpo.core.config import ConfigError, build_config
from tfgrpo.serve.config import ServeConfig

FLAGS = [
    *(
        opt.flag(name)
        for name in (
            "library",
            "upstream",
            "port",
            "host",
            "workers",
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
            "backoff_s",
            "reload_interval_s",
            "body_timeout_s",
            "header_timeout_s",
            "max_choices",
            "client_keys",
            "admin_keys",
            "cors_origins",
        )
    ),
    opt.flag("forward_client_auth_header", "--forward-client-auth-header/--no-forward-client-auth-header"),
    opt.flag("access_log", "--access-log/--no-access-log"),
    opt.flag("topk_index", "--topk-index/--no-topk-index"),
    opt.flag("deployment.enabled", "--deployment/--no-deployment"),
    *(
        opt.flag(f"deployment.{name}")
        for name in ("challenger_share", "poll_interval_s", "decide_interval_s", "guard_max_increase", "test_data")
    ),
    opt.flag("deployment.test.alpha", "--test-alpha"),
    *(opt.flag(f"deployment.test.{name}") for name in ("min_effect", "margin", "min_samples", "max_samples")),
]


def register(app: typer.Typer) -> None:
    @listed(app, "serve")
    @opt.config_options(ServeConfig, FLAGS)
    def serve_command(overrides: dict[str, Any], config: opt.ConfigOpt = None) -> None:
        from rich.console import Console

        if config is None and (overrides["library"] is None or not overrides["upstream"]):
            raise ConfigError("--library and --upstream are required (or --config serve.yaml)")
        settings = build_config(ServeConfig, config, overrides)
        try:
            from tfgrpo.serve.runner import serve
        except ImportError as exc:
            raise ConfigError(
                f"serving needs FastAPI, uvicorn and prometheus_client: pip install 'tfgrpo[serve]' "
                f"({exc.name} is missing)"
            ) from None
        console = Console(stderr=True, soft_wrap=True)
        serve(settings, announce=lambda line: console.print(line, highlight=False))
