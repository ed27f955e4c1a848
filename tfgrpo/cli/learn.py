"""`tfgrpo learn`: learn an experience library with Training-Free GRPO (thin over `tfgrpo.learn.loop.learn`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tfgrpo.cli import options as opt

EXIT_INTERRUPTED = 130
EXIT_BUDGET = 3


def register(app: typer.Typer) -> None:
    @app.command("learn")
    def learn_command(
        data: Annotated[
            str | None,
            typer.Option(
                "--data", help="Training problems: bundled name (easy, dapo100, ...) or a JSONL/JSON/CSV/parquet file."
            ),
        ] = None,
        out: Annotated[str | None, typer.Option("--out", "-o", help="Run directory.")] = None,
        val_data: Annotated[
            str | None,
            typer.Option("--val-data", help="Validation problems: after each epoch Mean@k picks the best library."),
        ] = None,
        config: opt.ConfigOpt = None,
        backend: opt.BackendOpt = None,
        model: opt.ModelOpt = None,
        base_url: opt.BaseUrlOpt = None,
        api_key: opt.ApiKeyOpt = None,
        adapter: opt.AdapterOpt = None,
        concurrency: opt.ConcurrencyOpt = None,
        budget_usd: opt.BudgetOpt = None,
        timeout: opt.TimeoutOpt = None,
        structured_output: opt.StructuredOutputOpt = None,
        group_size: Annotated[
            int | None, typer.Option("--group-size", "-G", help="Rollouts per query (default 5).")
        ] = None,
        epochs: Annotated[int | None, typer.Option("--epochs", help="Epochs (default 3).")] = None,
        batch_size: Annotated[
            int | None, typer.Option("--batch-size", help="Queries per step (default: the whole dataset).")
        ] = None,
        reward: Annotated[str | None, typer.Option("--reward", help="Reward name (default math).")] = None,
        ground_truth: Annotated[
            bool | None,
            typer.Option(
                "--ground-truth/--no-ground-truth",
                help="Score against gold answers, or against each group's majority answer.",
            ),
        ] = None,
        seed: opt.SeedOpt = None,
        temperature: Annotated[
            float | None, typer.Option("--temperature", help="Rollout temperature (default 0.7).")
        ] = None,
        max_tokens: Annotated[int | None, typer.Option("--max-tokens", help="Max new tokens per rollout.")] = None,
        top_p: opt.TopPOpt = None,
        stage_max_tokens: Annotated[
            int | None, typer.Option("--stage-max-tokens", help="Max new tokens per summary / operations reply.")
        ] = None,
        max_ops: Annotated[
            int | None, typer.Option("--max-ops", help="Operations proposed per group, at most (default 3).")
        ] = None,
        dedup: Annotated[
            bool | None,
            typer.Option("--dedup/--no-dedup", help="Show near-duplicates (vector store) to consolidation."),
        ] = None,
        inject: Annotated[str | None, typer.Option("--inject", help="'all' or 'topk:K'.")] = None,
        tools: Annotated[
            list[str] | None, typer.Option("--tools", help="Tools for multi-turn rollouts, e.g. python.")
        ] = None,
        max_turns: Annotated[int | None, typer.Option("--max-turns", help="Turns per trajectory with tools.")] = None,
        protocol: Annotated[
            str | None, typer.Option("--protocol", help="Tool protocol: auto | native | text.")
        ] = None,
        val_samples: Annotated[
            int | None, typer.Option("--val-samples", help="k of validation Mean@k (default 4).")
        ] = None,
        limit: Annotated[int | None, typer.Option("--limit", help="Use only the first N training problems.")] = None,
        init_library: Annotated[
            str | None, typer.Option("--init-library", help="Start from this library JSON.")
        ] = None,
        leakage: Annotated[
            str | None,
            typer.Option("--leakage", help="Operations containing a gold answer: reject (default) | flag | off."),
        ] = None,
        test_data: Annotated[
            list[str] | None,
            typer.Option(
                "--test-data", help="A test set (name or file; repeatable): learning data must not share its problems."
            ),
        ] = None,
        allow_test_overlap: Annotated[
            bool | None,
            typer.Option(
                "--allow-test-overlap", help="Learn even if --data/--val-data share problems with a test set."
            ),
        ] = None,
        select_by: Annotated[
            str | None,
            typer.Option(
                "--select-by", help="With --val-data: pick the best library per epoch (default) or per step."
            ),
        ] = None,
        seeds: Annotated[
            int | None,
            typer.Option("--seeds", help="Learn once per seed (--seed, --seed+1, ...) into OUT/seed-S: a seed set."),
        ] = None,
        gate: Annotated[
            bool | None,
            typer.Option(
                "--gate/--no-gate",
                help="With --val-data: keep a step's library only if validation does not drop beyond noise.",
            ),
        ] = None,
        resume: Annotated[
            bool, typer.Option("--resume", help="Continue the interrupted run in --out from its last completed step.")
        ] = False,
        from_traces: Annotated[
            str | None,
            typer.Option(
                "--from-traces",
                help="Learn from `tfgrpo serve` traces (SQLite file or database URL): exchanges with a gold answer as feedback, or every served prompt with --no-ground-truth.",
            ),
        ] = None,
    ) -> None:
        """Learn an experience library: G rollouts per query, summaries, group advantage, consolidation."""
        from rich.console import Console

        from tfgrpo.core.config import ConfigError, build_config
        from tfgrpo.learn.config import LearnConfig
        from tfgrpo.learn.loop import learn

        if from_traces is not None:
            data = _data_from_traces(
                from_traces, out, data=data, ground_truth=ground_truth, console=Console(stderr=True, soft_wrap=True)
            )
        if resume and config is None and out and (Path(out) / "config.yaml").is_file():
            config = str(Path(out) / "config.yaml")  # resume with the saved settings; options given now override
        overrides = {
            "data": data,
            "out": out,
            "val_data": val_data,
            "group_size": group_size,
            "epochs": epochs,
            "batch_size": batch_size,
            "reward": reward,
            "ground_truth": ground_truth,
            "seed": seed,
            "max_ops_per_group": max_ops,
            "inject": inject,
            "dedup": dedup,
            "agent": {"tools": tools, "max_turns": max_turns, "protocol": protocol},
            "val_samples": val_samples,
            "limit": limit,
            "init_library": init_library,
            "resume": resume or None,
            "llm": opt.llm_overrides(
                backend,
                model,
                base_url,
                api_key,
                adapter,
                concurrency,
                budget_usd=budget_usd,
                timeout_s=timeout,
                structured_output=structured_output,
            ),
            "rollout_sampling": {"temperature": temperature, "max_tokens": max_tokens, "top_p": top_p},
            "stage_sampling": {"max_tokens": stage_max_tokens},
            "leakage": leakage,
            "test_data": test_data,
            "allow_test_overlap": allow_test_overlap,
            "select_by": select_by,
            "gate": gate,
            "seeds": seeds,
        }
        settings = build_config(LearnConfig, config, overrides) if config or data else None
        if settings is None:
            raise ConfigError(
                "--data is required (a bundled name like 'easy' or a JSONL file), or --config learn.yaml"
            )
        console = Console(stderr=True, soft_wrap=True)
        from tfgrpo.llm.errors import LLMError

        try:
            if settings.seeds > 1:
                from tfgrpo.learn_seeds import learn_seeds

                results = learn_seeds(settings, settings.seeds, console=console)
            else:
                results = [learn(settings, console=console)]
        except LLMError as exc:
            console.print(f"[bold red]error:[/] {exc}", highlight=False)
            console.print(
                f"Completed steps are saved; once fixed, continue with: [bold]tfgrpo learn --out {settings.out} --resume[/]"
            )
            raise typer.Exit(2) from None
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


def _data_from_traces(traces: str, out: str | None, *, data: str | None, ground_truth: bool | None, console) -> str:
    """Write the traces' usable exchanges as `OUT/traces_problems.jsonl` and return that path as --data."""
    from tfgrpo.core.config import ConfigError
    from tfgrpo.serve.dataset import problems_from_traces

    if data is not None:
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
            f"{traces}: no usable exchanges (send feedback with a 'gold' answer, or learn with --no-ground-truth)"
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
            console.print(
                f"  step {leak['step']} {leak['action']}: {leak['kind']} of {leak['source']}:{leak['problem_id']} "
                f"({leak['evidence']}): {leak['text'][:80]}",
                highlight=False,
                markup=False,
            )
    console.print(f"library: [bold]{result.out / 'library.json'}[/] ({len(result.library)} experiences)")
