"""`tfgrpo chat "PROMPT"`: one reply from the chosen backend, the quickest check of a URL, key and model."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from tfgrpo.cli import options as opt
from tfgrpo.cli.lazy import listed
from tfgrpo.core.config import build_config
from tfgrpo.llm.chat import ChatConfig, run_chat

FLAGS = [
    opt.flag("system"),
    *opt.llm_flags("backend", "model", "base_url", "api_key", "adapter", "cache", "timeout_s", "structured_output"),
    *opt.sampling_flags("sampling", "temperature", "top_p", "max_tokens", "seed"),
]


def register(app: typer.Typer) -> None:
    @listed(app, "chat")
    @opt.config_options(ChatConfig, FLAGS)
    def chat(
        overrides: dict[str, Any],
        prompt: Annotated[str, typer.Argument(help="The user message.")],
        config: opt.ConfigOpt = None,
        show_usage: Annotated[
            bool, typer.Option("--usage/--no-usage", help="Print tokens, latency and cost to stderr.")
        ] = True,
    ) -> None:
        """With no backend options: the embedded SmolLM2-135M-Instruct, offline."""
        from rich.console import Console

        settings = build_config(ChatConfig, config, overrides)
        completion = run_chat(settings, prompt)
        typer.echo(completion.text)
        if show_usage:
            Console(stderr=True, soft_wrap=True).print(
                f"[dim]{settings.llm.backend} · {completion.usage.prompt_tokens} prompt + "
                f"{completion.usage.completion_tokens} completion tokens · {completion.latency_s:.2f}s · ${completion.cost_usd:.6f}"
                f"{' · cached' if completion.cached else ''}[/dim]"
            )
