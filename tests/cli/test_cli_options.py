"""Every CLI option that sets a config field shows that field's description and default, and beats YAML.

The commands declare such options as `Flag`s (tfgrpo/cli/options.py); these tests walk the whole app, so a
new command or option is covered without being listed here, and a help text cannot drift from its field.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import typing
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml
from pydantic import BaseModel, SecretStr
from typer.testing import CliRunner

import tfgrpo.finetune.run
from tfgrpo.cli import chat, deploy, evaluate, learn, learner, library_trust, options, score, serve
from tfgrpo.cli import mcp as mcp_cli
from tfgrpo.cli.app import app
from tfgrpo.core.config import build_config
from tfgrpo.eval.config import EvalConfig
from tfgrpo.experiment.recipe import Recipe
from tfgrpo.learn.config import LearnConfig
from tfgrpo.llm.config import LLMConfig
from tfgrpo.serve.config import ServeConfig
from tfgrpo.serve.mcp_config import McpConfig

WIDE = {"COLUMNS": "400", "TERM": "dumb", "NO_COLOR": "1"}
REQUIRED = {LearnConfig: {"data": "easy"}, ServeConfig: {"library": "lib.json", "upstream": ["http://127.0.0.1:9/v1"]}}
REQUIRED[McpConfig] = {"library": "lib.json"}


def _commands() -> dict[str, Any]:
    found: dict[str, Any] = {}

    def walk(command: Any, words: tuple[str, ...]) -> None:
        if command.callback is not None:
            found[" ".join(words)] = command
        names = command.list_commands(None) if hasattr(command, "list_commands") else []
        for name, sub in ((name, command.get_command(None, name)) for name in names):  # lazy groups load here
            walk(sub, (*words, name))

    walk(typer.main.get_command(app), ())
    return found


COMMANDS = _commands()
DERIVED = {name: cmd.callback.config_flags for name, cmd in COMMANDS.items() if hasattr(cmd.callback, "config_flags")}
CASES = [
    pytest.param(name, option, id=f"{name}:{option.decls[0]}")
    for name, (_, flags) in DERIVED.items()
    for option in flags
    if not option.help
]


@functools.cache
def _help(command: str) -> str:
    result = CliRunner().invoke(app, [*command.split(), "--help"], env=WIDE)
    assert result.exit_code == 0, result.output
    return result.output


def _option_row(help_text: str, decl: str) -> str:
    """The option's row of the help panel, its wrapped lines joined (whitespace collapsed)."""
    rows: list[list[str]] = []
    for line in help_text.splitlines():
        if line.lstrip().startswith(("╭", "╰")):
            continue
        cells = line.replace("│", " ").split()
        names = cells[1:] if cells[:1] == ["*"] else cells  # `*` marks a required option
        if names and names[0].startswith("-"):
            rows.append(names)
        elif rows and cells:
            rows[-1] += cells
    matching = [row for row in rows if row[0] == decl]
    assert len(matching) == 1, (decl, help_text)
    return " ".join(matching[0])


def _default_instance(model: type) -> Any:
    """The config as it is with nothing given (required fields filled in), to read defaults from."""
    if dataclasses.is_dataclass(model):
        return model()
    return model.model_validate(REQUIRED.get(model, {}))


def _get(config: Any, path: str) -> Any:
    for part in path.split("."):
        config = config[part] if isinstance(config, dict) else getattr(config, part)
    return config


def _expected_default(model: type, option: options.Flag) -> str | None:
    """The default `--help` must show, read from the config with nothing given (None: show none)."""
    if issubclass(model, BaseModel) and "." not in option.path and model.model_fields[option.path].is_required():
        return None
    value = _get(_default_instance(model), option.path)
    if value is None or value == []:
        return None
    if isinstance(value, bool):
        pair = next((d for d in option.decls if "/" in d), None)
        if pair is None:
            return "true" if value else None
        return pair.split("/")[0 if value else 1]
    return ", ".join(map(str, value)) if isinstance(value, list) else str(value)


@pytest.mark.parametrize(("command", "option"), CASES)
def test_option_shows_its_fields_description_and_default(command, option):
    model, _ = DERIVED[command]
    row = _option_row(_help(command), option.decls[0].split("/")[0])
    description = options.describe(model, option.path).description
    assert " ".join(description.split()) in row
    default = _expected_default(model, option)
    if default is None:
        assert "[default:" not in row
    else:
        assert row.endswith(f"[default: {default}]"), row


def test_every_command_that_takes_a_model_config_derives_its_options():
    deploy_commands = {f"deploy {name}" for name in ("status", "propose", "log", *deploy.CHANGES)}
    assert (
        set(DERIVED)
        == {"chat", "learn", "eval", "score", "finetune", "serve", "library ablate", "mcp", "learner"}
        | deploy_commands
    )
    assert len(CASES) >= 90


def test_hand_described_options_are_only_those_of_heavy_configs():
    """Only finetune's TRL fields (torch at import) keep a written help; none names a number as its default."""
    for command, (_, flags) in DERIVED.items():
        written = {option.path for option in flags if option.help}
        assert not written or command == "finetune", (command, written)
    for command in COMMANDS:
        for param in COMMANDS[command].params:
            assert not re.search(r"\(default:? [\d.]+\)", getattr(param, "help", None) or ""), (command, param.name)


def test_a_described_field_needs_a_description():
    class Bare(BaseModel):
        size: int = 3

    with pytest.raises(TypeError, match="Bare.size has no description"):
        options.option_help(Bare, options.flag("size"))


def test_nested_defaults_are_the_sections_own():
    """eval samples at 0.6 and chat greedily: the shown default is the section's, not SamplingParams' 0.7."""
    assert options.describe(EvalConfig, "sampling.temperature").default == 0.6
    assert options.describe(chat.ChatConfig, "sampling.temperature").default == 0.0
    assert options.describe(LearnConfig, "stage_sampling.temperature").default == 0.0
    assert "[default: 0.6]" in _option_row(_help("eval"), "--temperature")
    assert "[default: 256]" in _option_row(_help("chat"), "--max-tokens")


def test_experiment_api_key_help_comes_from_the_recipe_model():
    row = _option_row(_help("experiment"), "--api-key")
    assert Recipe.model_fields["model"].default_factory is LLMConfig
    assert LLMConfig.model_fields["api_key"].description in row


# -- YAML < command line ----------------------------------------------------------------------------------------


class _Captured(Exception):
    pass


def _values(model: type, option: options.Flag) -> tuple[Any, Any]:
    """Two different valid values of the field: (from YAML, from the command line)."""
    leaf = option.path.rpartition(".")[2]
    if option.kind is not None:
        annotation = option.kind
    else:
        annotation = options.describe(model, option.path).annotation
    special = {
        "inject": ("topk:2", "topk:3"),
        "base_url": (["http://127.0.0.1:1/v1"], ["http://127.0.0.1:2/v1", "http://127.0.0.1:3/v1"]),
        "upstream": (["http://127.0.0.1:1/v1"], ["http://127.0.0.1:2/v1"]),
        "tools": (["python"], ["web_search", "python"]),  # tool names are checked with the config
        "peft": ("lora", "dora"),  # so is the adapter kind (finetune, before TRL loads)
        "data": ("easy", "easy_train"),  # and finetune's data: a bundled set, or a file that exists
        "reward": ("exact", "numeric"),  # reward names are checked with the config (serve)
        "cors_origins": (["https://a.example"], ["https://b.example", "http://127.0.0.1:3000"]),  # origins too
        "report_to": (["tensorboard"], ["mlflow", "wandb"]),  # tracker names are checked with the config
        "max_request_bytes": (2048, 4096),  # mcp: at least 1 KiB
        "min_samples": (5, 10),  # at most max_samples (default 2000)
        "max_samples": (100, 200),  # at least min_samples (default 20)
    }
    if leaf in special:
        return special[leaf]
    plain = options.cli_type(annotation)
    choices = typing.get_args(options.non_optional(annotation))
    if choices and all(isinstance(c, str) for c in choices):
        return choices[0], choices[-1]
    if plain is bool:
        return False, True
    if plain is int:
        return 2, 3
    if plain is float:
        return 0.25, 0.5
    if plain == list[str]:
        return ["alpha"], ["beta", "gamma"]
    return "alpha", "beta"


def _cli_args(option: options.Flag, value: Any) -> list[str]:
    pair = next((d for d in option.decls if "/" in d), None)
    if isinstance(value, bool):
        return [pair.split("/")[0 if value else 1]] if pair else [option.decls[0]]
    items = value if isinstance(value, list) else [value]
    return [arg for item in items for arg in (option.decls[0], str(item))]


def _plain(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    return str(value) if isinstance(value, Path) else value


# command -> (arguments before the options, YAML every run needs, the CLI module whose build_config is spied on)
RUNS: dict[str, tuple[list[str], dict[str, Any], Any]] = {
    "learn": ([], {"data": "easy", "val_data": "easy"}, learn),
    "eval": ([], {}, evaluate),
    "chat": (["hello"], {}, chat),
    "serve": ([], {"library": "lib.json", "upstream": ["http://127.0.0.1:9/v1"]}, serve),
    "library ablate": (["LIB.json", "--data", "easy"], {}, library_trust),
    "score": (["rows.jsonl", "--reward", "judge"], None, score),  # no --config: the judge's model only
    "finetune": (["sft"], {"data": "rows.jsonl", "out": "out"}, None),
    "mcp": (
        ["lib.json"],
        {"transport": "http", "client_keys": "k.txt", "default_k": 1},
        mcp_cli,
    ),  # any host, any max_k
    "learner": ([], {}, learner),
    **{f"deploy {name}": ([], {}, deploy) for name in ("status", "log", *deploy.CHANGES)},
    "deploy propose": (["lib.json"], {}, deploy),
}
OVERRIDE_CASES = [
    pytest.param(name, option, id=f"{name}:{option.decls[0]}")
    for name, (_, flags) in DERIVED.items()
    for option in flags
]


def _run(monkeypatch, tmp_path, command: str, yaml_data: dict[str, Any] | None, extra: list[str]) -> Any:
    """Run the command until its settings are built; return them (a config model, or finetune's options)."""
    words, _, module = RUNS[command]
    captured: dict[str, Any] = {}
    monkeypatch.chdir(tmp_path)  # the input files score and finetune check for before they build anything
    (tmp_path / "rows.jsonl").write_text('{"completion": "3", "answer": "3"}\n')
    if module is not None:

        def spy(model, config, overrides):
            captured["settings"] = build_config(model, config, overrides)
            raise _Captured

        monkeypatch.setattr(module, "build_config", spy)
    else:

        def run_finetune(method, *, data, out, model, options):
            captured["settings"] = {**options, "data": data, "out": out, "model": model}
            raise _Captured

        monkeypatch.setattr(tfgrpo.finetune.run, "load_method", lambda method: None)
        monkeypatch.setattr(tfgrpo.finetune.run, "run_finetune", run_finetune)
    args = [*command.split(), *words, *extra]
    if yaml_data is not None:
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(yaml_data))
        args += ["--config", str(tmp_path / "config.yaml")]
    result = CliRunner().invoke(app, args)
    assert isinstance(result.exception, _Captured), (args, result.output, result.exception)
    return captured["settings"]


@pytest.mark.parametrize(("command", "option"), OVERRIDE_CASES)
def test_the_command_line_overrides_the_yaml_value(monkeypatch, tmp_path, command, option):
    model, _ = DERIVED[command]
    from_yaml, from_cli = _values(model, option)
    base = RUNS[command][1]
    if command == "eval" and option.path == "inject":
        base = {"library": "lib.json"}  # topk selects from a library
    if option.path == "llm.llamacpp_instances":
        base = {**base, "llm": {"backend": "llamacpp"}}  # the other backends refuse it
    if option.path == "admin_keys":
        base = {**base, "client_keys": "client_keys.txt"}  # an admin key is a client key with more rights
    if command == "mcp" and option.path == "transport":
        base = {}  # stdio refuses client keys; http needs none on the loopback host
    nested: dict[str, Any] = {}
    for path in (option.path, *option.also):
        *sections, leaf = path.split(".")
        target = nested
        for section in sections:
            target = target.setdefault(section, {})
        target[leaf] = from_yaml
    if base is None:  # no --config on this command: the option alone reaches the field
        settings = _run(monkeypatch, tmp_path, command, None, _cli_args(option, from_cli))
        assert _plain(_get(settings, option.path)) == from_cli
        return
    yaml_data = {**base, **{key: value for key, value in nested.items() if key not in base}}
    for key, value in nested.items():
        if key in base and isinstance(value, dict):
            yaml_data[key] = {**base[key], **value}
        elif key in base:
            yaml_data[key] = value
    settings = _run(monkeypatch, tmp_path, command, yaml_data, [])
    for path in (option.path, *option.also):
        assert _plain(_get(settings, path)) == from_yaml, path
    settings = _run(monkeypatch, tmp_path, command, yaml_data, _cli_args(option, from_cli))
    for path in (option.path, *option.also):
        assert _plain(_get(settings, path)) == from_cli, path
