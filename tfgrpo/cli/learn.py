"""`tfgrpo learn`: learn an experience library with Training-Free GRPO (thin over `tfgrpo.learn.loop.learn`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from tfgrpo.cli import options as opt
from tfgrpo.cli.lazy import listed
from tfgrpo.core.config import ConfigError, build_config
from tfgrpo.core.secrets import mask_url
from tfgrpo.learn.config import LearnConfig

EXIT_INTERRUPTED = 130
EXIT_BUDGET = 3

FLAGS = [
    opt.flag("data"),
    opt.flag("out", "-o"),
    opt.flag("val_data"),
    opt.flag("dataset_cache"),
    *opt.llm_flags(
        "backend",
        "model",
        "base_url",
        "api_key",
        "adapter",
        "concurrency",
        "budget_usd",
        "timeout_s",
        "structured_output",
        "llamacpp_instances",
    ),
    opt.flag("group_size", "-G"),
    opt.flag("epochs"),
    opt.flag("batch_size"),
    opt.flag("reward"),
    opt.flag("ground_truth", "--ground-truth/--no-ground-truth"),
    opt.flag("seed"),
    *opt.sampling_flags("rollout_sampling", "temperature", "max_tokens", "top_p", label="Rollouts"),
    opt.flag("stage_sampling.max_tokens", "--stage-max-tokens", label="Summaries and operations"),
    opt.flag("summary_max_tokens"),
    opt.flag("max_ops_per_group", "--max-ops"),
    opt.flag("dedup"),
    opt.flag("dedup_enforce_threshold"),
    opt.flag("inject"),
    opt.flag("credit_leave_out"),
    opt.flag("credit_retire", "--credit-retire/--no-credit-retire"),
    opt.flag("agent.tools", "--tools"),
    opt.flag("agent.max_turns", "--max-turns"),
    opt.flag("agent.protocol", "--protocol"),
    opt.flag("val_samples"),
    opt.flag("limit"),
    opt.flag("max_dataset_mb"),
    opt.flag("init_library"),
    opt.flag("leakage"),
    opt.flag("test_data"),
    opt.flag("allow_test_overlap"),
    opt.flag("select_by"),
    opt.flag("seeds"),
    opt.flag("gate", "--gate/--no-gate"),
    opt.flag("resume"),
    opt.flag("allow_config_change"),
    *opt.tracking_flags(),
]


def register(app: typer.Typer) -> None:
    @listed(app, "learn")
    @opt.config_options(LearnConfig, FLAGS)
    def learn_command(
        overrides: dict[str, Any],
        config: opt.ConfigOpt = None,
        from_traces: Annotated[
            str | None,
            typer.Option(
                "--from-traces",
                help="Learn from `tfgrpo serve` traces (SQLite file or database URL): exchanges with a gold answer as feedback, or every served prompt with --no-ground-truth.",
            ),
        ] = None,
    ) -> None:
        from rich.console import Console

        console = Console(stderr=True, soft_wrap=True)
        if from_traces is not None:
            overrides["data"] = _data_from_traces(from_traces, overrides, console=console)
        out = overrides["out"]
        if overrides["resume"] and config is None and out and (Path(out) / "config.yaml").is_file():
            config = str(Path(out) / "config.yaml")  # resume with the saved settings; options given now override
        if not (config or overrides["data"]):
            raise ConfigError(
                "--data is required (a bundled name like 'easy' or a JSONL file), or --config learn.yaml"
            )
        settings = build_config(LearnConfig, config, overrides)
        results = _learn(settings, console)
        for result in results:
            _report(console, result)
        if len(results) > 1 or settings.seeds > 1:
            console.print(
                f"seed set: [bold]{settings.out}[/] ({len(results)}/{settings.seeds} runs); evaluate all with "
                f"[bold]tfgrpo eval --library {settings.out}[/]"
            )
        if results[-1].status == "interrupted":
            raise typer.Exit(EXIT_INTERRUPTED)
        if results[-1].status == "budget_exceeded":
            raise typer.Exit(EXIT_BUDGET)


def _learn(settings: LearnConfig, console) -> list:
    """One run, or one per seed; a model error ends with how to resume (completed steps are saved)."""
    from tfgrpo.learn.loop import learn
    from tfgrpo.llm.errors import LLMError

    try:
        if settings.seeds > 1:
            from tfgrpo.experiment.learn_seeds import learn_seeds  # numpy: only a multi-seed run needs it

            return learn_seeds(settings, settings.seeds, console=console)
        return [learn(settings, console=console)]
    except LLMError as exc:
        console.print(f"[bold red]error:[/] {exc}", highlight=False)
        console.print(
            f"Completed steps are saved; once fixed, continue with: [bold]tfgrpo learn --out {settings.out} --resume[/]"
        )
        raise typer.Exit(2) from None


def _data_from_traces(traces: str, overrides: dict[str, Any], *, console) -> str:
    """Write the traces' usable exchanges as `OUT/traces_problems.jsonl` and return that path as --data."""
    from tfgrpo.serve.dataset import problems_from_traces

    out, ground_truth = overrides["out"], overrides["ground_truth"]
    if overrides["data"] is not None:
        raise ConfigError("--from-traces and --data are exclusive: the traces are the training data")
    if not out:
        raise ConfigError("--from-traces needs --out (the problems file is written into the run directory)")
    found = problems_from_traces(traces, Path(out) / "traces_problems.jsonl", ground_truth=ground_truth is not False)
    console.print(
        f"traces: {found.exchanges} exchanges -> {found.problems} problems"
        + (
            f" ({found.skipped_without_gold} with a reward but no gold answer skipped)"
            if found.skipped_without_gold
            else ""
        ),
        highlight=False,
    )
    if found.problems == 0:
        raise ConfigError(
            f"{mask_url(traces)}: no usable exchanges "
            "(send feedback with a 'gold' answer, or learn with --no-ground-truth)"
        )
    return str(found.path)


def _report(console, result) -> None:
    from tfgrpo.learn.metrics import epoch_table

    if result.metrics.get("epochs") is not None:
        console.print(epoch_table(result.metrics))
    leaks = result.metrics.get("leakage") or []
    if leaks:
        console.print(f"[yellow]leakage guard:[/] {len(leaks)} finding(s) (metrics.json 'leakage'):", highlight=False)
        for leak in leaks[:10]:
            tie = ": ".join(filter(None, [leak.get("tied"), leak.get("tie_evidence")])) or "coincidence"
            console.print(
                f"  step {leak['step']} {leak['action']}: {leak['kind']} of {leak['source']}:{leak['problem_id']} "
                f"({leak['evidence']}) [{tie}]: {leak['text'][:80]}",
                highlight=False,
                markup=False,
            )
    from tfgrpo.learn.credit import summary_lines

    for line in summary_lines(result.metrics):
        console.print(line, highlight=False, markup=False)
    console.print(f"library: [bold]{result.out / 'library.json'}[/] ({len(result.library)} experiences)")
