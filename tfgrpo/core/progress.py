"""Rich progress bars shared by long-running commands (learn, eval)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


def stage_progress(console: Console) -> Progress:
    return Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )


@contextmanager
def progress_task(progress: Progress, description: str, total: int) -> Iterator[Callable[[int], None]]:
    """One live bar while a stage runs, removed when it ends; yields `advance(k)`."""
    task_id = progress.add_task(description, total=total)
    try:
        yield lambda k: progress.advance(task_id, k)
    finally:
        progress.remove_task(task_id)
