"""`tfgrpo learn`: learn an experience library with Training-Free GRPO (thin over `tfgrpo.learn.learn`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tfgrpo.cli import options as opt

EXIT_INTERRUPTED = 130
EXIT_BUDGET = 3


def register(app: typer.Typer) -> None:
    @app.command("learn")
    def learn_command(
        data: Annotated[Optional[str], typer.Option("--data", help="Training problems: bundled name (easy, dapo100, ...) or a JSONL/JSON/CSV/parquet file.")] = None,
        out: Annotated[Optional[str], typer.Option("--out", "-o", help="Run directory.")] = None,
        val_data: Annotated[Optional[str], typer.Option("--val-data", help="Validation problems: after each epoch Mean@k picks the best library.")] = None,
        config: opt.ConfigOpt = None,
        backend: opt.BackendOpt = None,
        model: opt.ModelOpt = None,
        base_url: opt.BaseUrlOpt = None,
        api_key: opt.ApiKeyOpt = None,
        adapter: opt.AdapterOpt = None,
        concurrency: opt.ConcurrencyOpt = None,
        budget_usd: opt.BudgetOpt = None,
        structured_output: opt.StructuredOutputOpt = None,
        group_size: Annotated[Optional[int], typer.Option("--group-size", "-G", help="Rollouts per query (default 5).")] = None,
        epochs: Annotated[Optional[int], typer.Option("--epochs", help="Epochs (default 3).")] = None,
        batch_size: Annotated[Optional[int], typer.Option("--batch-size", help="Queries per step (default: the whole dataset).")] = None,
        reward: Annotated[Optional[str], typer.Option("--reward", help="Reward name (default math).")] = None,
        ground_truth: Annotated[Optional[bool], typer.Option("--ground-truth/--no-ground-truth", help="Score against gold answers, or against each group's majority answer.")] = None,
        seed: opt.SeedOpt = None,
        temperature: Annotated[Optional[float], typer.Option("--temperature", help="Rollout temperature (default 0.7).")] = None,
        max_tokens: Annotated[Optional[int], typer.Option("--max-tokens", help="Max new tokens per rollout.")] = None,
        top_p: opt.TopPOpt = None,
        stage_max_tokens: Annotated[Optional[int], typer.Option("--stage-max-tokens", help="Max new tokens per summary / operations reply.")] = None,
        max_ops: Annotated[Optional[int], typer.Option("--max-ops", help="Operations proposed per group, at most (default 3).")] = None,
        dedup: Annotated[Optional[bool], typer.Option("--dedup/--no-dedup", help="Show near-duplicates (vector store) to consolidation.")] = None,
        inject: Annotated[Optional[str], typer.Option("--inject", help="'all' or 'topk:K'.")] = None,
        tools: Annotated[Optional[list[str]], typer.Option("--tools", help="Tools for multi-turn rollouts, e.g. python.")] = None,
        max_turns: Annotated[Optional[int], typer.Option("--max-turns", help="Turns per trajectory with tools.")] = None,
        protocol: Annotated[Optional[str], typer.Option("--protocol", help="Tool protocol: auto | native | text.")] = None,
        val_samples: Annotated[Optional[int], typer.Option("--val-samples", help="k of validation Mean@k (default 4).")] = None,
        limit: Annotated[Optional[int], typer.Option("--limit", help="Use only the first N training problems.")] = None,
        init_library: Annotated[Optional[str], typer.Option("--init-library", help="Start from this library JSON.")] = None,
        resume: Annotated[bool, typer.Option("--resume", help="Continue the interrupted run in --out from its last completed step.")] = False,
    ) -> None:
        """Learn an experience library: G rollouts per query, summaries, group advantage, consolidation."""
        from rich.console import Console

        from tfgrpo.config import ConfigError, build_config
        from tfgrpo.learn import learn
        from tfgrpo.learn_config import LearnConfig
        from tfgrpo.learn_metrics import epoch_table

        if resume and config is None and out and (Path(out) / "config.yaml").is_file():
            config = str(Path(out) / "config.yaml")  # resume with the saved settings; options given now override
        overrides = {
            "data": data, "out": out, "val_data": val_data, "group_size": group_size, "epochs": epochs,
            "batch_size": batch_size, "reward": reward, "ground_truth": ground_truth, "seed": seed,
            "max_ops_per_group": max_ops, "inject": inject, "dedup": dedup, "agent": {"tools": tools, "max_turns": max_turns, "protocol": protocol},
            "val_samples": val_samples, "limit": limit, "init_library": init_library, "resume": resume or None,
            "llm": opt.llm_overrides(backend, model, base_url, api_key, adapter, concurrency, budget_usd=budget_usd, structured_output=structured_output),
            "rollout_sampling": {"temperature": temperature, "max_tokens": max_tokens, "top_p": top_p},
            "stage_sampling": {"max_tokens": stage_max_tokens},
        }
        settings = build_config(LearnConfig, config, overrides) if config or data else None
        if settings is None:
            raise ConfigError("--data is required (a bundled name like 'easy' or a JSONL file), or --config learn.yaml")
        if settings.llm.api_key == "***":  # the saved config hides the key: take it from --api-key or the environment
            settings.llm.api_key = None
        console = Console(stderr=True, soft_wrap=True)
        from tfgrpo.llm.errors import LLMError

        try:
            result = learn(settings, console=console)
        except LLMError as exc:
            console.print(f"[bold red]error:[/] {exc}", highlight=False)
            console.print(f"Completed steps are saved; once fixed, continue with: [bold]tfgrpo learn --out {settings.out} --resume[/]")
            raise typer.Exit(2) from None
        if result.metrics.get("epochs") is not None:
            console.print(epoch_table(result.metrics))
        console.print(f"library: [bold]{result.out / 'library.json'}[/] ({len(result.library)} experiences)")
        if result.status == "interrupted":
            raise typer.Exit(EXIT_INTERRUPTED)
        if result.status == "budget_exceeded":
            raise typer.Exit(EXIT_BUDGET)
