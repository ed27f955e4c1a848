"""Commands load when they run: the table `tfgrpo --help` lists is the modules' own help, and the quick
commands import only what they use (benchmarks/cli_startup.py measures the time; this guards the set)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import typer
import typer.main

from tfgrpo.cli.lazy import COMMANDS, LIBRARY_COMMANDS, load_command

COMMAND_MODULES = {module for module, _ in COMMANDS.values()} | {"tfgrpo.cli.library_trust"}
#: what no quick command may pull in: the engine, the client layer, eval, fine-tuning, serving, the store
ENGINE = (
    "tfgrpo.learn",
    "tfgrpo.llm",
    "tfgrpo.rollout",
    "tfgrpo.serve",
    "tfgrpo.eval",
    "tfgrpo.finetune",
    "chromadb",
    "openai",
)


@pytest.mark.parametrize(
    ("table", "name"), [(COMMANDS, n) for n in COMMANDS] + [(LIBRARY_COMMANDS, n) for n in LIBRARY_COMMANDS]
)
def test_the_listed_help_is_the_commands_own(table, name):
    command = load_command(name, table)  # its module registers it by `listed`: the help comes from the table
    assert command.name == name
    assert command.help.startswith(table[name][1]) and command.get_short_help_str(1000) == table[name][1]


def test_every_registered_command_is_listed():
    for module in sorted({module for module, _ in COMMANDS.values()}):
        holder = typer.Typer(add_completion=False)
        __import__(module, fromlist=["register"]).register(holder)
        names = set(typer.main.get_group(holder).commands)
        assert names <= set(COMMANDS), (module, names - set(COMMANDS))


def imported_by(*argv: str) -> set[str]:
    code = (
        "import sys, json\nfrom tfgrpo.cli.app import main\n"
        f"try:\n    main({list(argv)!r})\nexcept SystemExit:\n    pass\n"
        "print(json.dumps(sorted(sys.modules)), file=sys.stderr)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    return set(json.loads(result.stderr.strip().splitlines()[-1]))


def _under(modules: set[str], prefixes: tuple[str, ...] | set[str]) -> set[str]:
    return {m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes)}


def test_help_imports_no_command_module():
    modules = imported_by("--help")
    assert _under(modules, COMMAND_MODULES) == set()
    assert _under(modules, ("rich", "pydantic", "tfgrpo.experiences", *ENGINE)) == set()


def test_library_show_imports_no_engine(tmp_path):
    library = tmp_path / "lib.json"
    library.write_text(
        json.dumps(
            {"format": "tfgrpo.library/1", "version": 1, "experiences": [{"id": "G0", "text": "Check the carry."}]}
        )
    )
    modules = imported_by("library", "show", str(library))
    assert "tfgrpo.cli.library" in modules and "tfgrpo.experiences.model" in modules  # it did run
    assert _under(modules, ENGINE) == set()
    assert (
        _under(
            modules,
            ("tfgrpo.cli.library_trust", "tfgrpo.experiences.dedup", "tfgrpo.experiences.apply", "json_repair"),
        )
        == set()
    )
