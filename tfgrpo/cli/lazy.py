"""Sub-commands loaded when they run, not when `tfgrpo` starts.

Each command module imports typer and the pydantic config classes its options come from; importing all
of them would be paid by every invocation, `tfgrpo --help` included. The top-level group lists the
commands from `COMMANDS` (name, module, one-line help) and imports a module only to run or describe its
own command. The one-line help is written here only: a module registers its command with `listed`, which
takes the line from the table (and the function's docstring, if any, as the details below it).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

import typer
import typer.main
from typer.core import TyperCommand, TyperGroup

#: name -> (module whose `register(app)` defines it, the one-line help shown by `tfgrpo --help`)
COMMANDS: dict[str, tuple[str, str]] = {
    "chat": ("tfgrpo.cli.chat", "Print one reply."),
    "learn": (
        "tfgrpo.cli.learn",
        "Learn an experience library: G rollouts per query, summaries, group advantage, consolidation.",
    ),
    "eval": (
        "tfgrpo.cli.evaluate",
        "Evaluate K samples per problem; writes metrics.json and samples.jsonl (cached, resumable).",
    ),
    "compare": (
        "tfgrpo.cli.compare",
        "Compare eval runs: Mean@K with CIs, pass@k, maj@k, paired differences vs the first run, cost table.",
    ),
    "score": ("tfgrpo.cli.score", "Score each row of a JSONL file."),
    "library": (
        "tfgrpo.cli.library",
        "Inspect and edit an experience library: show, history, diff, rollback, dedup, apply, check, ablate, prune.",
    ),
    "export": (
        "tfgrpo.cli.export",
        "Write LIB as md, txt, json, yaml, a ready system prompt (exactly the text injected while learning), an "
        "Agent Skill folder or an AGENTS.md section.",
    ),
    "import": (
        "tfgrpo.cli.export",
        "Read experiences from md / txt / json / yaml / system-prompt files, a skill folder, an AGENTS.md section or "
        "a plain list of lines into a library.",
    ),
    "finetune": (
        "tfgrpo.cli.finetune",
        "Fine-tune a model with METHOD on a learn run's rollouts or a problem file; save adapter + summary.",
    ),
    "serve": (
        "tfgrpo.cli.serve",
        "Serve a library as an OpenAI-compatible endpoint: injection, A/B holdout, traces, feedback, hot reload.",
    ),
    "mcp": (
        "tfgrpo.cli.mcp",
        "Serve a library to MCP clients (Claude Code, Codex, Cursor) over stdio or HTTP: retrieval, listing, outcomes.",
    ),
    "experiment": (
        "tfgrpo.cli.experiment",
        "Run a recipe: learn runs, fine-tuned baselines, evals, then one table with CIs and paired tests.",
    ),
    "learner": (
        "tfgrpo.cli.learner",
        "Learn beside `tfgrpo serve`: Training-Free GRPO from the champion on rewarded traffic, proposing challengers.",
    ),
    "deploy": (
        "tfgrpo.cli.deploy",
        "Operate serve's champion/challenger deployment: status, propose, promote, rollback, pause, resume, log.",
    ),
}


#: `tfgrpo library` commands whose module imports the eval stack (their options come from EvalConfig)
LIBRARY_COMMANDS: dict[str, tuple[str, str]] = {
    "check": (
        "tfgrpo.cli.library_trust",
        "Flag experiences containing a gold answer (equal under the math reward) or copying a problem; exit 1 if "
        "any is a leak (tied to its problem), 0 when every match is a coincidence.",
    ),
    "ablate": (
        "tfgrpo.cli.library_trust",
        "Leave-one-out utility of every experience (with a bootstrap CI), written into LIB's metadata.",
    ),
    "prune": (
        "tfgrpo.cli.library_trust",
        "Remove experiences that hurt, by the utilities `library ablate` wrote or by the credit learn measured (a "
        "new version, kept in the history; `library rollback` undoes it).",
    ),
}


def listed(
    app: typer.Typer, name: str, table: dict[str, tuple[str, str]] = COMMANDS
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`@listed(app, "learn")`: register the function as command `name` of `app`, its help the table's line
    followed by the function's docstring (the details), if it has one."""

    def register(function: Callable[..., Any]) -> Callable[..., Any]:
        details = inspect.cleandoc(function.__doc__ or "")
        app.command(name, help=table[name][1] + (f"\n\n{details}" if details else ""))(function)
        return function

    return register


def load_command(name: str, commands: dict[str, tuple[str, str]] = COMMANDS) -> Any:
    """The click command `name`, built from its module's `register` (the module is imported now)."""
    module_name, _ = commands[name]
    holder = typer.Typer(add_completion=False)
    importlib.import_module(module_name).register(holder)
    group = typer.main.get_group(holder)
    command = group.commands.get(name)
    if command is None:
        raise RuntimeError(f"{module_name}.register defines no command {name!r}")
    return command


class _Listed(TyperCommand):
    """What `tfgrpo --help` needs of a command (its name and one line), without importing it."""

    def __init__(self, name: str, help_text: str) -> None:
        super().__init__(name, help=help_text, short_help=help_text)


class LazyGroup(TyperGroup):
    """A typer group whose commands are imported by name, when they are run or asked for their help.

    `lazy_commands` is the table of the group; `plain_help` renders the group's own help with click's
    plain formatter instead of typer's rich one (rich's help renderer alone costs ~0.25 s of start-up)."""

    lazy_commands: dict[str, tuple[str, str]] = COMMANDS
    plain_help = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        eager = [name for name in super().list_commands(ctx) if name not in self.lazy_commands]
        return [*eager, *self.lazy_commands]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in self.lazy_commands or cmd_name in self.commands:
            return super().get_command(ctx, cmd_name)
        if self._listing:
            return _Listed(cmd_name, self.lazy_commands[cmd_name][1])
        command = load_command(cmd_name, self.lazy_commands)
        self.commands[cmd_name] = command
        return command

    def format_help(self, ctx: Any, formatter: Any) -> None:
        # the command list shows the table's lines: no command module is imported to describe them
        self._listing, markup = True, self.rich_markup_mode
        if self.plain_help:
            self.rich_markup_mode = None
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing, self.rich_markup_mode = False, markup


class LazyLibraryGroup(LazyGroup):
    """`tfgrpo library`: show/history/diff/... eager (cheap), check/ablate/prune loaded when used."""

    lazy_commands = LIBRARY_COMMANDS
    plain_help = False


__all__ = ["COMMANDS", "LIBRARY_COMMANDS", "LazyGroup", "LazyLibraryGroup", "listed", "load_command"]
