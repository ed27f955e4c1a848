"""`tfgrpo library check LIB --against DATA...`: leaked gold answers and copied problems in a library."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

EXIT_LEAKS = 1  # like a linter: a check that found something fails a CI step


def register(library_app: typer.Typer) -> None:
    @library_app.command("check")
    def check(
        library_path: Annotated[Path, typer.Argument(help="Library JSON file.", show_default=False)],
        against: Annotated[list[str], typer.Option("--against", help="Problem set (bundled name or file); repeatable.", show_default=False)],
        ngram: Annotated[int, typer.Option("--ngram", help="n of the word n-grams compared for copied problems.")] = 6,
        copy_threshold: Annotated[float, typer.Option("--copy-threshold", help="Shared n-gram fraction from which an experience copies a problem.")] = 0.5,
        min_integer: Annotated[int, typer.Option("--min-integer", help="Integer answers below this (in absolute value) are not compared.")] = 10,
        as_json: Annotated[Optional[bool], typer.Option("--json", help="Print the findings as JSON lines.")] = None,
    ) -> None:
        """Flag experiences containing a gold answer (equal under the math reward) or copying a problem; exit 1 if any."""
        import json

        from rich.console import Console
        from rich.table import Table

        from eval.datasets import load_dataset_rows
        from experiences import Library
        from experiences.leakage import LeakageChecker

        library = Library.load(library_path)
        sets = {name: load_dataset_rows(name, require_answer=False) for name in dict.fromkeys(against)}
        try:
            checker = LeakageChecker(sets, ngram=ngram, copy_threshold=copy_threshold, min_integer=min_integer)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
        findings = checker.check_library(library)
        console = Console(soft_wrap=True)
        if as_json:
            for finding in findings:
                print(json.dumps(finding.model_dump(), ensure_ascii=False))
        elif findings:
            table = Table(title=f"{library_path}: {len(findings)} finding(s) against {checker.size} problems", title_justify="left")
            for column in ("id", "kind", "problem", "evidence", "text"):
                table.add_column(column, overflow="fold")
            for f in findings:
                table.add_row(f.experience_id or "", f.kind, f"{f.source}:{f.problem_id}", f.evidence, f.text)
            console.print(table)
        else:
            console.print(f"{library_path}: clean ({len(library)} experiences against {checker.size} problems of {', '.join(sets)})")
        if findings:
            raise typer.Exit(EXIT_LEAKS)
