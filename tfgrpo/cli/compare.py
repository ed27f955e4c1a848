"""`tfgrpo compare`: paired comparison of eval runs on the same problems, as markdown, HTML and plots."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tfgrpo.cli.lazy import listed


def register(app: typer.Typer) -> None:
    @listed(app, "compare")
    def compare(
        run_dirs: Annotated[
            list[Path] | None,
            typer.Argument(help="Eval run directories or seed sets; the first is the baseline.", show_default=False),
        ] = None,
        out: Annotated[
            Path | None,
            typer.Option("--out", "-o", help="Report directory (report.md, report.html, PNGs, comparison.json)."),
        ] = None,
        learn_run: Annotated[
            Path | None, typer.Option("--learn-run", help="A learn run directory: adds its learning curve.")
        ] = None,
        traces: Annotated[
            str | None,
            typer.Option(
                "--traces",
                help="Compare the A (holdout) and B (library) arms of `tfgrpo serve` traces instead (SQLite file or database URL): intention to treat and treated only.",
            ),
        ] = None,
        seed: Annotated[int, typer.Option("--seed", help="Seed of the bootstrap CIs and the permutation tests.")] = 0,
        matrix: Annotated[
            Path | None,
            typer.Option(
                "--matrix", help="An eval matrix directory (tfgrpo eval --matrix): the model x library table."
            ),
        ] = None,
    ) -> None:
        from tfgrpo.core.atomic import folder_target
        from tfgrpo.core.config import ConfigError

        if out is not None:
            folder_target(out, ConfigError)  # before any run is read: a report folder that cannot be made
        if traces is not None:
            if run_dirs:
                raise ConfigError("--traces compares served arms; give either eval run directories or --traces")
            _compare_traces(traces, out, seed=seed)
            return
        if (not run_dirs and matrix is None) or out is None:
            raise ConfigError("give eval run directories (or --matrix DIR) and --out, or --traces TRACES")

        from tfgrpo.eval.compare import compare_runs

        comparison, files = compare_runs(run_dirs or [], out, learn_run=learn_run, seed=seed, matrix=matrix)
        _print_comparison(comparison, files)


def _print_comparison(comparison, files: dict[str, Path]) -> None:
    from rich.console import Console
    from rich.table import Table as RichTable

    from tfgrpo.eval.report import build_tables

    console = Console()
    for table in build_tables(comparison):
        if table.key == "per_problem":
            continue  # long; it is in the report files
        rich_table = RichTable(title=table.title, title_justify="left")
        if len(table.rows) == 1 and len(table.headers) > 6:  # one wide record reads better as a list
            rich_table.add_column("")
            rich_table.add_column("")
            for header, value in zip(table.headers, table.rows[0], strict=False):
                rich_table.add_row(header, value)
        else:
            for header in table.headers:
                rich_table.add_column(header)
            for row in table.rows:
                rich_table.add_row(*row)
        console.print(rich_table)
        if table.note and table.key != "cost":
            console.print(f"[dim]{table.note}[/]", highlight=False)
    console.print(f"report: {files['markdown']}  {files['html']}", highlight=False)


def _compare_traces(traces: str, out: Path | None, *, seed: int) -> None:
    from rich.console import Console
    from rich.table import Table as RichTable

    from tfgrpo.eval.traces import compare_traces, comparison_rows, untreated_notes

    results = compare_traces(traces, seed=seed)
    console = Console()
    if not results:
        console.print(f"{traces}: no exchange has feedback yet (POST /v1/feedback)", highlight=False)
        return
    titles = {
        False: "Intention to treat: A = holdout, B = assigned the library (rewarded exchanges)",
        True: "Treated only: A = holdout, B = the exchanges actually given the library",
    }
    for treated_only, title in titles.items():
        headers, rows = comparison_rows(results, treated_only=treated_only)
        table = RichTable(title=title, title_justify="left")
        for header in headers:
            table.add_column(header)
        for row in rows:
            table.add_row(*row)
        console.print(table)
    for note in untreated_notes(results) or ["every B exchange was given the library"]:
        console.print(note, highlight=False, soft_wrap=True)
    if out is not None:
        import json

        out.mkdir(parents=True, exist_ok=True)
        (out / "traces_comparison.json").write_text(
            json.dumps([r.model_dump() for r in results], indent=2), encoding="utf-8"
        )
        console.print(f"report: {out / 'traces_comparison.json'}", highlight=False)
