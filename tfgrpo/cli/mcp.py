"""`tfgrpo mcp LIBRARY`: a library served to MCP clients (thin over `tfgrpo.serve.mcp_server`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from tfgrpo.cli import options as opt
from tfgrpo.cli.lazy import listed
from tfgrpo.core.config import ConfigError, build_config
from tfgrpo.serve.mcp_config import McpConfig

FLAGS = [
    opt.flag(name)
    for name in (
        "transport",
        "host",
        "port",
        "client_keys",
        "traces",
        "store_dir",
        "default_k",
        "max_k",
        "max_task_chars",
        "max_request_bytes",
        "reward_min",
        "reward_max",
        "reload_interval_s",
    )
]


def register(app: typer.Typer) -> None:
    @listed(app, "mcp")
    @opt.config_options(McpConfig, FLAGS)
    def mcp_command(
        overrides: dict[str, Any],
        library: Annotated[
            Path | None,
            typer.Argument(help="Library JSON to serve (or `library:` in --config).", show_default=False),
        ] = None,
        config: opt.ConfigOpt = None,
    ) -> None:
        from rich.console import Console

        if library is not None:
            overrides["library"] = library
        elif config is None:
            raise ConfigError("give the library to serve: tfgrpo mcp LIBRARY (or --config mcp.yaml)")
        settings = build_config(McpConfig, config, overrides)
        try:
            from tfgrpo.serve.mcp_server import run
        except ImportError as exc:
            raise ConfigError(
                f"tfgrpo mcp needs the MCP SDK: pip install 'tfgrpo[mcp]' ({exc.name} is missing)"
            ) from None
        console = Console(stderr=True, soft_wrap=True)
        run(settings, announce=lambda line: console.print(line, highlight=False))
