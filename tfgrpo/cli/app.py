"""The `tfgrpo` command line: one typer app, one module per command group, each thin over a library call."""

from __future__ import annotations

import sys

import typer

from tfgrpo.cli.lazy import LazyGroup

# The commands are listed in tfgrpo.cli.lazy.COMMANDS and imported when they run: `tfgrpo --help` and a
# quick `tfgrpo library show` pay only for what they use (tests/cli/test_cli_lazy.py guards the import set).
app = typer.Typer(
    name="tfgrpo",
    cls=LazyGroup,
    help="Training-Free GRPO: learn an experience library in context, evaluate it, export it, compare it with fine-tuning.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def _group() -> None:
    """Training-Free GRPO: learn an experience library in context, evaluate it, export it, compare it with fine-tuning."""


def main(argv: list[str] | None = None) -> None:
    """Run the command line (`argv=None`: the process's arguments)."""
    from tfgrpo.cli.errors import os_error_line, user_facing_errors

    try:
        # Not standalone: typer's own errors (an unknown option, a value it cannot parse, a missing argument)
        # come back here and print as one line like ours, instead of a usage line and a framed box.
        code = app(args=argv, standalone_mode=False)
    except typer.Abort:  # Ctrl-C or end of input at a prompt
        _print_error("aborted")
        sys.exit(1)
    except typer.TyperException as exc:  # click's exceptions, as typer ships them
        _print_usage_error(exc)
    except user_facing_errors() as exc:  # a clear message, never a traceback, for the user's own mistakes
        _print_error(str(exc))
        sys.exit(2)
    except OSError as exc:  # the machine's refusal (a read-only folder, a full disk): what and where, one line
        _print_error(os_error_line(exc))
        sys.exit(2)
    if isinstance(code, int) and not isinstance(code, bool) and code:  # typer.Exit(code) raised by a command
        sys.exit(code)


def _print_usage_error(exc: typer.TyperException) -> None:
    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    if message:  # empty for "no arguments": typer has printed the help already
        ctx = getattr(exc, "ctx", None)
        _print_error(message + (f" (see: {ctx.command_path} --help)" if ctx is not None else ""))
    sys.exit(getattr(exc, "exit_code", 2))


def _print_error(message: str) -> None:
    from rich.console import Console
    from rich.markup import escape

    from tfgrpo.core.secrets import mask_url

    message = mask_url(message)  # whatever raised it, a URL's credentials never reach the terminal or a log

    # Escaped: messages quote user text ("tfgrpo[finetune]", "[G3]") that is not markup. Not wrapped at 80
    # columns when stderr is a file, so a one-line error stays one line in logs.
    console = Console(stderr=True, soft_wrap=True)
    console.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
