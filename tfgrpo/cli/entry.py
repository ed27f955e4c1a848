"""The `tfgrpo` program (console script and `python -m tfgrpo`): the command line of this process.

It pauses the garbage collector before anything is imported (tfgrpo.core.collector says why and when it is
resumed); `tfgrpo.cli.app.main(argv)`, called in-process by other programs and tests, leaves it alone.
"""

from __future__ import annotations

from tfgrpo.core.collector import pause_for_startup


def main() -> None:
    pause_for_startup()
    from tfgrpo.cli.app import main as run_command_line

    run_command_line()
