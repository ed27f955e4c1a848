"""Run the `tfgrpo` command line in-process, as a user would, and get its exit code."""

from __future__ import annotations

from tfgrpo.cli.app import main


def run_cli(*args: object) -> int:
    """`main([...])` with every argument as a string (paths, numbers); 0 when it returns normally."""
    try:
        main([str(a) for a in args])
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0
