"""`tfgrpo learner`: learn beside `tfgrpo serve` from its rewarded traffic (thin over `tfgrpo.live.learner`)."""

from __future__ import annotations

from typing import Any

import typer

from tfgrpo.cli import options as opt
from tfgrpo.cli.lazy import listed
from tfgrpo.core.config import build_config
from tfgrpo.live.config import LearnerConfig

EXIT_INTERRUPTED = 130
EXIT_BUDGET = 3
EXIT_FAILED = 2

FLAGS = [
    opt.flag("traces"),
    opt.flag("out", "-o"),
    opt.flag("ground_truth", "--ground-truth/--no-ground-truth"),
    opt.flag("rated_threshold"),
    opt.flag("settle_s"),
    opt.flag("poll_interval_s"),
    opt.flag("propose_every"),
    opt.flag("propose_interval_min"),
    opt.flag("max_problems"),
    opt.flag("once"),
    *opt.llm_flags("backend", "model", "base_url", "api_key", "concurrency", "budget_usd", "timeout_s"),
    opt.flag("group_size", "-G"),
    opt.flag("epochs"),
    opt.flag("batch_size"),
    opt.flag("reward"),
    opt.flag("test_data"),
]


def register(app: typer.Typer) -> None:
    @listed(app, "learner")
    @opt.config_options(LearnerConfig, FLAGS)
    def learner_command(overrides: dict[str, Any], config: opt.ConfigOpt = None) -> None:
        """Follows the trace store (SQLite or PostgreSQL), learns from the champion every --propose-every
        rewarded exchanges or --propose-interval-min minutes, and proposes the result as the challenger; the
        sequential test decides. A restart resumes from --out (its cursor: no exchange is read twice)."""
        from rich.console import Console

        from tfgrpo.live.learner import run_learner

        console = Console(stderr=True, soft_wrap=True)
        settings = build_config(LearnerConfig, config, overrides)
        result = run_learner(settings, console=console)
        state = result.state
        proposed = sum(r.status == "proposed" for r in state.rounds)
        console.print(
            f"learner {result.status}: {len(state.rounds)} round(s), {proposed} proposed; {state.read} rows read, "
            f"{state.skipped} skipped ({state.malformed} malformed, {state.locked_out} locked out); "
            f"cost ${state.cost_usd:.4f}; state: {settings.out}/state.json",
            highlight=False,
            markup=False,
        )
        if result.status == "interrupted":
            raise typer.Exit(EXIT_INTERRUPTED)
        if result.status == "budget_exceeded":
            raise typer.Exit(EXIT_BUDGET)
        if result.status == "failed":
            raise typer.Exit(EXIT_FAILED)
