"""`tfgrpo chat "PROMPT"`: one reply from the chosen backend, the quickest check of a URL, key and model."""

from __future__ import annotations

from typing import Annotated

import typer

from tfgrpo.cli import options as opt


def register(app: typer.Typer) -> None:
    @app.command("chat")
    def chat(
        prompt: Annotated[str, typer.Argument(help="The user message.")],
        system: Annotated[str | None, typer.Option("--system", help="An optional system message.")] = None,
        config: opt.ConfigOpt = None,
        backend: opt.BackendOpt = None,
        model: opt.ModelOpt = None,
        base_url: opt.BaseUrlOpt = None,
        api_key: opt.ApiKeyOpt = None,
        adapter: opt.AdapterOpt = None,
        cache: opt.CacheOpt = None,
        timeout: opt.TimeoutOpt = None,
        structured_output: opt.StructuredOutputOpt = None,
        temperature: opt.TemperatureOpt = None,
        top_p: opt.TopPOpt = None,
        max_tokens: opt.MaxTokensOpt = None,
        seed: opt.SeedOpt = None,
        show_usage: Annotated[
            bool, typer.Option("--usage/--no-usage", help="Print tokens, latency and cost to stderr.")
        ] = True,
    ) -> None:
        """Print one reply. With no backend options: the embedded SmolLM2-135M-Instruct, offline."""
        from rich.console import Console

        from tfgrpo.llm.chat import ChatConfig, run_chat

        overrides = {
            "llm": opt.llm_overrides(
                backend,
                model,
                base_url,
                api_key,
                adapter,
                cache=cache,
                timeout_s=timeout,
                structured_output=structured_output,
            ),
            "sampling": opt.sampling_overrides(temperature, top_p, max_tokens, seed),
            "system": system,
        }
        from tfgrpo.core.config import build_config

        settings = build_config(ChatConfig, config, overrides)
        completion = run_chat(settings, prompt)
        typer.echo(completion.text)
        if show_usage:
            Console(stderr=True, soft_wrap=True).print(
                f"[dim]{settings.llm.backend} · {completion.usage.prompt_tokens} prompt + "
                f"{completion.usage.completion_tokens} completion tokens · {completion.latency_s:.2f}s · ${completion.cost_usd:.6f}"
                f"{' · cached' if completion.cached else ''}[/dim]"
            )
