"""`tfgrpo experiment RECIPE --out DIR`: one command from a recipe to the paper-style table (thin over
`tfgrpo.experiment.runner.run_experiment`)."""

from __future__ import annotations

from typing import Annotated

import typer

from tfgrpo.cli import options as opt
from tfgrpo.cli.lazy import listed
from tfgrpo.experiment.recipe import BUNDLED_RECIPES, Recipe

EXIT_BUDGET = 3
EXIT_INTERRUPTED = 130


def register(app: typer.Typer) -> None:
    @listed(app, "experiment")
    def experiment_command(
        recipe: Annotated[
            str,
            typer.Argument(help=f"A recipe YAML file, or a bundled one: {' | '.join(BUNDLED_RECIPES)}."),
        ],
        out: Annotated[
            str,
            typer.Option(
                "--out", "-o", help="Experiment folder: every step's run directory, experiment.json, report/."
            ),
        ],
        set_: Annotated[
            list[str] | None,
            typer.Option(
                "--set",
                help="Override any recipe key: KEY.PATH=VALUE (repeatable), e.g. --set evals.aime24.samples=8.",
            ),
        ] = None,
        budget_usd: Annotated[
            float | None, typer.Option("--budget-usd", help="Cap on the whole experiment's spend, in USD.")
        ] = None,
        dry_run: Annotated[
            bool,
            typer.Option(
                "--dry-run",
                help="Print the plan and the cost and time estimates (local backends timed); spend nothing.",
            ),
        ] = False,
        api_key: Annotated[
            str | None, typer.Option("--api-key", help=opt.option_help(Recipe, opt.flag("model.api_key")))
        ] = None,
        report_to: Annotated[
            list[str] | None, typer.Option("--report-to", help=opt.option_help(Recipe, opt.flag("report_to")))
        ] = None,
    ) -> None:
        from rich.console import Console

        from tfgrpo.experiment.recipe import load_recipe
        from tfgrpo.experiment.runner import run_experiment

        loaded = load_recipe(recipe, set_)
        if api_key:
            loaded.model.api_key = api_key
        if report_to:
            from tfgrpo.core.tracking import parse_report_to

            loaded.report_to = parse_report_to(report_to) or ["none"]  # type: ignore[assignment]
        console = Console(stderr=True, soft_wrap=True)
        result = run_experiment(loaded, out, budget_usd=budget_usd, dry_run=dry_run, console=console)
        if result.status == "budget_exceeded":
            raise typer.Exit(EXIT_BUDGET)
        if result.status == "interrupted":
            raise typer.Exit(EXIT_INTERRUPTED)
        if result.report is not None:
            import json

            from rich.table import Table

            data = json.loads((result.report.parent / "table.json").read_text(encoding="utf-8"))
            table = Table(title=data["title"], title_justify="left")
            for header in data["headers"]:
                table.add_column(header)
            for row in data["rows"]:
                table.add_row(*row)
            Console(soft_wrap=True).print(table)
