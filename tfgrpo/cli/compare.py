"""`tfgrpo compare`: paired comparison of eval runs on the same problems, as markdown, HTML and plots."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tfgrpo.cli.options import SeedOpt


def register(app: typer.Typer) -> None:
    @app.command("compare")
    def compare(
        out: Annotated[Path, typer.Option("--out", "-o", help="Report directory (report.md, report.html, PNGs, comparison.json).")],
        run_dirs: Annotated[Optional[list[Path]], typer.Argument(help="Eval run directories or seed sets; the first is the baseline.", show_default=False)] = None,
        learn_run: Annotated[Optional[Path], typer.Option("--learn-run", help="A learn run directory: adds its learning curve.")] = None,
        seed: SeedOpt = None,
        matrix: Annotated[Optional[Path], typer.Option("--matrix", help="An eval matrix directory (tfgrpo eval --matrix): the model x library table.")] = None,
    ) -> None:
        """Compare eval runs: Mean@K with CIs, pass@k, maj@k, paired differences vs the first run, cost table."""
        from rich.console import Console
        from rich.table import Table as RichTable

        from eval.compare import compare_runs
        from eval.report import build_tables

        comparison, files = compare_runs(run_dirs or [], out, learn_run=learn_run, seed=0 if seed is None else seed, matrix=matrix)
        console = Console()
        for table in build_tables(comparison):
            if table.key == "per_problem":
                continue  # long; it is in the report files
            rich_table = RichTable(title=table.title, title_justify="left")
            if len(table.rows) == 1 and len(table.headers) > 6:  # one wide record reads better as a list
                rich_table.add_column("")
                rich_table.add_column("")
                for header, value in zip(table.headers, table.rows[0]):
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
