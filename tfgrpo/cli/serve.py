"""`tfgrpo serve`: a learned library behind an OpenAI-compatible endpoint (thin over `tfgrpo.serve.app`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tfgrpo.cli import options as opt
from tfgrpo.serve.config import ServeConfig

_FIELDS = ServeConfig.model_fields


def _help(name: str) -> str:
    field = _FIELDS[name]
    default = field.default
    return f"{field.description}" + ("" if default is None or field.is_required() else f" [default: {default}]")


def register(app: typer.Typer) -> None:
    @app.command("serve")
    def serve_command(
        library: Annotated[Path | None, typer.Option("--library", help=_help("library"), show_default=False)] = None,
        upstream: Annotated[
            list[str] | None, typer.Option("--upstream", help=_help("upstream"), show_default=False)
        ] = None,
        port: Annotated[int | None, typer.Option("--port", help=_help("port"), show_default=False)] = None,
        host: Annotated[str | None, typer.Option("--host", help=_help("host"), show_default=False)] = None,
        model: Annotated[str | None, typer.Option("--model", help=_help("model"), show_default=False)] = None,
        api_key: Annotated[str | None, typer.Option("--api-key", help=_help("api_key"), show_default=False)] = None,
        inject: Annotated[str | None, typer.Option("--inject", help=_help("inject"), show_default=False)] = None,
        store_dir: Annotated[
            Path | None, typer.Option("--store-dir", help=_help("store_dir"), show_default=False)
        ] = None,
        holdout: Annotated[float | None, typer.Option("--holdout", help=_help("holdout"), show_default=False)] = None,
        arm_key_header: Annotated[
            str | None, typer.Option("--arm-key-header", help=_help("arm_key_header"), show_default=False)
        ] = None,
        traces: Annotated[str | None, typer.Option("--traces", help=_help("traces"), show_default=False)] = None,
        reward: Annotated[str | None, typer.Option("--reward", help=_help("reward"), show_default=False)] = None,
        timeout_s: Annotated[
            float | None, typer.Option("--timeout-s", help=_help("timeout_s"), show_default=False)
        ] = None,
        max_retries: Annotated[
            int | None, typer.Option("--max-retries", help=_help("max_retries"), show_default=False)
        ] = None,
        reload_interval_s: Annotated[
            float | None, typer.Option("--reload-interval-s", help=_help("reload_interval_s"), show_default=False)
        ] = None,
        config: opt.ConfigOpt = None,
    ) -> None:
        """Serve a library as an OpenAI-compatible endpoint: injection, A/B holdout, traces, feedback, hot reload."""
        from rich.console import Console

        from tfgrpo.core.config import ConfigError, build_config

        overrides = {
            "library": library,
            "upstream": upstream,
            "port": port,
            "host": host,
            "model": model,
            "api_key": api_key,
            "inject": inject,
            "store_dir": store_dir,
            "holdout": holdout,
            "arm_key_header": arm_key_header,
            "traces": traces,
            "reward": reward,
            "timeout_s": timeout_s,
            "max_retries": max_retries,
            "reload_interval_s": reload_interval_s,
        }
        if config is None and (library is None or not upstream):
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
            f"on http://{settings.host}:{settings.port}/v1 -> {', '.join(settings.upstream)}; traces: {settings.traces}",
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
