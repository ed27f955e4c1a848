"""`tfgrpo eval`: Mean@K / pass@k / maj@k of a model, with or without a library, adapter or system prompt."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from tfgrpo.cli import options as opt
from tfgrpo.cli.lazy import listed
from tfgrpo.core.config import build_config
from tfgrpo.eval.config import EvalConfig

FLAGS = [
    opt.flag("data"),
    opt.flag("out", "-o"),
    opt.flag("library"),
    opt.flag("system_prompt"),
    opt.flag("inject"),
    opt.flag("samples", "-k"),
    opt.flag("limit"),
    opt.flag("dataset_cache"),
    opt.flag("reward"),
    opt.flag("agent.tools", "--tools"),
    opt.flag("agent.max_turns", "--max-turns"),
    opt.flag("agent.protocol", "--protocol"),
    opt.flag("label"),
    *opt.tracking_flags(),
    *opt.llm_flags(
        "backend",
        "model",
        "base_url",
        "api_key",
        "adapter",
        "concurrency",
        "cache",
        "budget_usd",
        "timeout_s",
        "structured_output",
        "llamacpp_instances",
    ),
    *opt.sampling_flags("sampling", "temperature", "top_p", "max_tokens"),
    opt.flag("seed", also=["sampling.seed"]),
]


def register(app: typer.Typer) -> None:
    @listed(app, "eval")
    @opt.config_options(EvalConfig, FLAGS)
    def eval_command(
        overrides: dict[str, Any],
        matrix: Annotated[
            str | None, typer.Option("--matrix", help="YAML of models x libraries: one eval per cell (docs/trust.md).")
        ] = None,
        config: opt.ConfigOpt = None,
    ) -> None:
        from rich.console import Console

        if matrix:
            _run_matrix(matrix)
            return
        settings = build_config(EvalConfig, config, overrides)
        console = Console(stderr=True, soft_wrap=True)
        try:
            # the engine loads when the command runs (numpy and the SDKs), so `tfgrpo --help` stays fast
            from tfgrpo.eval.runner import evaluate
            from tfgrpo.eval.seeds import is_seed_set

            if settings.library and is_seed_set(settings.library):  # a learn seed set: one eval per seed
                from tfgrpo.eval.seed_eval import evaluate_seed_set

                results = evaluate_seed_set(settings, console=console)
            else:
                results = [evaluate(settings, console=console)]
        except KeyboardInterrupt:
            console.print(
                f"[yellow]interrupted.[/] Rerun the same command to resume: answered calls are cached in {settings.out}/cache.sqlite."
            )
            raise typer.Exit(130) from None
        for result in results:
            _print_metrics(result, settings.data, console)
        if len(results) > 1:
            console.print(
                f"seed set: {settings.out} (compare it as one system: tfgrpo compare BASE {settings.out} --out REPORT)"
            )


def _print_metrics(result, data: str, console) -> None:
    from rich.console import Console
    from rich.table import Table

    m = result.metrics
    table = Table(title=f"{m['label']} on {data}")
    for column in ("problems", f"Mean@{m['k']}", "95% CI", "maj@k", "pass@k", "failed", "tokens out", "cost $"):
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


def _run_matrix(path: str) -> None:
    from pydantic import ValidationError
    from rich.console import Console

    from tfgrpo.core.config import ConfigError, format_validation_error, read_yaml
    from tfgrpo.eval.matrix import MatrixConfig, run_matrix

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
