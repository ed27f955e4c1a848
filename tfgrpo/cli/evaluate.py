"""`tfgrpo eval`: Mean@K / pass@k / maj@k of a model, with or without a library, adapter or system prompt."""

from __future__ import annotations

from typing import Annotated

import typer

from tfgrpo.cli import options as opt


def register(app: typer.Typer) -> None:
    @app.command("eval")
    def eval_command(
        data: Annotated[
            str | None,
            typer.Option(
                "--data",
                help="Bundled name (aime24, aime25, amc23, easy, dapo100, math_l5_train200) or a JSONL/HF file.",
            ),
        ] = None,
        out: Annotated[str | None, typer.Option("--out", "-o", help="Run directory.")] = None,
        library: Annotated[str | None, typer.Option("--library", help="Experience library JSON to inject.")] = None,
        system_prompt: Annotated[
            str | None,
            typer.Option(
                "--system-prompt", help="System prompt file (e.g. from `tfgrpo export --format system-prompt`)."
            ),
        ] = None,
        inject: Annotated[str | None, typer.Option("--inject", help="'all' or 'topk:K'.")] = None,
        samples: Annotated[int | None, typer.Option("--samples", "-k", help="K samples per problem.")] = None,
        limit: Annotated[int | None, typer.Option("--limit", help="Only the first N problems.")] = None,
        reward: Annotated[str | None, typer.Option("--reward", help="Reward name (math, exact, choice, ...).")] = None,
        tools: Annotated[
            list[str] | None, typer.Option("--tools", help="Tools for multi-turn rollouts (python).")
        ] = None,
        max_turns: Annotated[int | None, typer.Option("--max-turns", help="Turns per trajectory with tools.")] = None,
        protocol: Annotated[
            str | None, typer.Option("--protocol", help="Tool protocol: auto | native | text.")
        ] = None,
        label: Annotated[str | None, typer.Option("--label", help="Name of this system in compare reports.")] = None,
        matrix: Annotated[
            str | None, typer.Option("--matrix", help="YAML of models x libraries: one eval per cell (docs/trust.md).")
        ] = None,
        config: opt.ConfigOpt = None,
        backend: opt.BackendOpt = None,
        model: opt.ModelOpt = None,
        base_url: opt.BaseUrlOpt = None,
        api_key: opt.ApiKeyOpt = None,
        adapter: opt.AdapterOpt = None,
        concurrency: opt.ConcurrencyOpt = None,
        cache: opt.CacheOpt = None,
        budget_usd: opt.BudgetOpt = None,
        timeout: opt.TimeoutOpt = None,
        structured_output: opt.StructuredOutputOpt = None,
        temperature: opt.TemperatureOpt = None,
        top_p: opt.TopPOpt = None,
        max_tokens: opt.MaxTokensOpt = None,
        seed: opt.SeedOpt = None,
    ) -> None:
        """Evaluate K samples per problem; writes metrics.json and samples.jsonl (cached, resumable)."""
        from rich.console import Console
        from rich.table import Table

        from eval.runner import EvalConfig, evaluate
        from tfgrpo.core.config import build_config

        if matrix:
            _run_matrix(matrix)
            return
        overrides = {
            "data": data,
            "out": out,
            "library": library,
            "system_prompt": system_prompt,
            "inject": inject,
            "samples": samples,
            "limit": limit,
            "reward": reward,
            "agent": {"tools": tools, "max_turns": max_turns, "protocol": protocol},
            "label": label,
            "seed": seed,
            "llm": opt.llm_overrides(
                backend,
                model,
                base_url,
                api_key,
                adapter,
                concurrency,
                cache=cache,
                budget_usd=budget_usd,
                timeout_s=timeout,
                structured_output=structured_output,
            ),
            "sampling": opt.sampling_overrides(temperature, top_p, max_tokens, seed),
        }
        settings = build_config(EvalConfig, config, overrides)
        console = Console(stderr=True, soft_wrap=True)
        try:
            from eval.seeds import is_seed_set

            if settings.library and is_seed_set(settings.library):  # a learn seed set: one eval per seed
                from eval.seed_eval import evaluate_seed_set

                results = evaluate_seed_set(settings, console=console)
            else:
                results = [evaluate(settings, console=console)]
        except KeyboardInterrupt:
            console.print(
                f"[yellow]interrupted.[/] Rerun the same command to resume: answered calls are cached in {settings.out}/cache.sqlite."
            )
            raise typer.Exit(130) from None
        for result in results:
            m = result.metrics
            table = Table(title=f"{m['label']} on {settings.data}")
            for column in (
                "problems",
                f"Mean@{m['k']}",
                "95% CI",
                "maj@k",
                "pass@k",
                "failed",
                "tokens out",
                "cost $",
            ):
                table.add_column(column)
            passes = " ".join(f"@{k}:{v:.3f}" for k, v in m["pass_at_k"].items())
            table.add_row(
                str(m["num_problems"]),
                f"{m['mean_at_k']:.3f}",
                f"[{m['ci95'][0]:.3f}, {m['ci95'][1]:.3f}]",
                f"{m['maj_at_k']:.3f}",
                passes,
                str(m["failed_samples"]),
                str(m["tokens"]["completion"]),
                f"{m['cost_usd']:.4f}",
            )
            Console().print(table)
            console.print(f"wrote {result.out}/metrics.json and samples.jsonl")
        if len(results) > 1:
            console.print(
                f"seed set: {settings.out} (compare it as one system: tfgrpo compare BASE {settings.out} --out REPORT)"
            )


def _run_matrix(path: str) -> None:
    from pydantic import ValidationError
    from rich.console import Console

    from eval.matrix import MatrixConfig, run_matrix
    from tfgrpo.core.config import ConfigError, format_validation_error, read_yaml

    try:
        settings = MatrixConfig.model_validate(read_yaml(path))
        settings.cells()  # every cell's eval settings are checked before any call
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source=f"matrix {path}")) from None
    console = Console(stderr=True, soft_wrap=True)
    results = run_matrix(settings, console=console)
    for result in results:
        m = result.metrics
        console.print(
            f"{m['label']}: Mean@{m['k']} {m['mean_at_k']:.3f} [{m['ci95'][0]:.3f}, {m['ci95'][1]:.3f}]",
            highlight=False,
        )
    console.print(
        f"matrix: {settings.out} ({len(results)} cells); table: tfgrpo compare --matrix {settings.out} --out REPORT",
        highlight=False,
    )
