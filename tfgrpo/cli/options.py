"""Command-line options derived from the config models, so a setting's help and default live in one place.

A command lists its options as `Flag`s naming a config field (`"group_size"`, `"llm.timeout_s"`) and is
decorated with `config_options(Model, flags)`: each flag becomes a typer option whose help is the field's
description and whose shown default is the field's default, and the command receives what the user gave as
one nested `overrides` dict (None = not given) for `build_config(Model, config, overrides)`, where the YAML
file (`--config`) fills the rest and the command line wins. Options that set no config field are written by
hand in the command.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel
from rich.markup import escape

from tfgrpo.llm.config import LLMConfig

ConfigOpt = Annotated[
    str | None,
    typer.Option("--config", "-c", help="YAML file with any of the options; the command line overrides it."),
]

_NO_DEFAULT = object()
_PLAIN_TYPES = (int, float, bool, str, Path)


@dataclasses.dataclass(frozen=True)
class Flag:
    """An option that sets the config field at `path` (dotted through nested sections: `llm.timeout_s`)."""

    path: str
    decls: tuple[str, ...]
    also: tuple[str, ...] = ()  # more fields the same value sets (eval's --seed: seed and sampling.seed)
    label: str = ""  # whose setting it is, where the field's own description cannot say (learn's "Rollouts")
    # Only where the field's class cannot be imported when the CLI starts (TRL's configs pull in torch):
    help: str = ""
    kind: Any = None

    @property
    def name(self) -> str:
        """The command function's parameter name: the long flag without dashes (`--max-ops` -> max_ops)."""
        long = next(decl for decl in self.decls if decl.startswith("--"))
        return long.split("/")[0].removeprefix("--").replace("-", "_")


def flag(path: str, *decls: str, also: Sequence[str] = (), label: str = "", help: str = "", kind: Any = None) -> Flag:
    """`flag("group_size", "-G")`: the long flag defaults to the field name (`--group-size`). `help` and `kind`
    describe a field whose class is too heavy to import at start-up; every other flag reads its field."""
    if not any(decl.startswith("--") for decl in decls):
        decls = (f"--{path.rpartition('.')[2].replace('_', '-')}", *decls)
    if bool(help) != (kind is not None):
        raise TypeError(f"flag {path!r}: give both help and kind, or neither (the field supplies them)")
    return Flag(path, tuple(decls), tuple(also), label, help, kind)


@dataclasses.dataclass(frozen=True)
class Setting:
    """What a config model says about one field: its description, type and default (`_NO_DEFAULT`: none)."""

    description: str
    annotation: Any
    default: Any


def describe(model: type, path: str) -> Setting:
    """The field at `path` of a pydantic model or dataclass. The default of a nested field is the one its
    section's default holds (eval samples at temperature 0.6, not `SamplingParams`' own 0.7)."""
    *sections, leaf = path.split(".")
    owner, section_default = model, None
    for section in sections:
        _, annotation, default = _field(owner, section)
        if section_default is not None:
            default = getattr(section_default, section)
        section_default = default if isinstance(default, BaseModel) else None
        owner = _section_type(annotation)
    description, annotation, default = _field(owner, leaf)
    if section_default is not None:
        default = getattr(section_default, leaf)
    return Setting(description, annotation, default)


def _field(owner: type, name: str) -> tuple[str, Any, Any]:
    if issubclass(owner, BaseModel):
        field = owner.model_fields[name]
        default = _NO_DEFAULT if field.is_required() else field.get_default(call_default_factory=True)
        return field.description or "", field.annotation, default
    found = {f.name: f for f in dataclasses.fields(owner)}[name]
    if found.default is not dataclasses.MISSING:
        default = found.default
    elif found.default_factory is not dataclasses.MISSING:
        default = found.default_factory()
    else:
        default = _NO_DEFAULT
    return found.metadata.get("help", ""), typing.get_type_hints(owner)[name], default


def _section_type(annotation: Any) -> type:
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and (issubclass(candidate, BaseModel) or dataclasses.is_dataclass(candidate)):
            return candidate
    raise TypeError(f"{annotation!r} is not a config section")


def cli_type(annotation: Any) -> Any:
    """The type typer parses the option as: the field's own for plain types, else str (pydantic converts and
    validates it, so a bad value gets the same message from the command line as from YAML)."""
    kind = non_optional(annotation)
    if typing.get_origin(kind) is list:
        return list[str]
    return kind if kind in _PLAIN_TYPES else str


def _is_union(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType)


def shown_default(setting: Setting, option: Flag) -> str | None:
    """The default as `--help` shows it; None when there is nothing to show (no default, None, empty)."""
    value = setting.default
    if value is _NO_DEFAULT or value is None or value == [] or value == {}:
        return None
    if isinstance(value, bool):
        pair = next((decl for decl in option.decls if "/" in decl), None)
        if pair is None:
            return None if value is False else "true"
        on, off = pair.split("/")
        return on if value else off
    if isinstance(value, list):
        return ", ".join(str(item) for item in value)
    return str(value)


def option_help(model: type, option: Flag) -> str:
    """The field's description (with its choices when it does not list them) and its default, as rich markup."""
    if option.help:
        return escape(option.help)
    setting = describe(model, option.path)
    if not setting.description:
        raise TypeError(f"{model.__name__}.{option.path} has no description: give the field one")
    text = setting.description
    choices = [str(c) for c in typing.get_args(non_optional(setting.annotation)) if isinstance(c, str)]
    if typing.get_origin(non_optional(setting.annotation)) is typing.Literal and not all(c in text for c in choices):
        text = f"{text} One of: {' | '.join(choices)}."
    if option.label:
        text = f"{option.label}: {text}"
    default = shown_default(setting, option)
    return escape(text) + (f" [dim]\\[default: {escape(default)}][/dim]" if default is not None else "")


def non_optional(annotation: Any) -> Any:
    """`int | None` -> int; a union of several types stays as it is."""
    if _is_union(annotation):
        kinds = [a for a in typing.get_args(annotation) if a is not type(None)]
        return kinds[0] if len(kinds) == 1 else annotation
    return annotation


def overrides_from(flags: Sequence[Flag], values: dict[str, Any]) -> dict[str, Any]:
    """`{"llm": {"timeout_s": 30}, ...}` from the flags' values by parameter name (None = not given)."""
    nested: dict[str, Any] = {}
    for option in flags:
        for path in (option.path, *option.also):
            *sections, leaf = path.split(".")
            target = nested
            for section in sections:
                target = target.setdefault(section, {})
            target[leaf] = values[option.name]
    return nested


def config_options(model: type, flags: Sequence[Flag]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Add `flags` to a typer command as options of `model`'s fields; the command gets them as `overrides`.

    The command's own parameters (arguments, `--config`, options that set no field) stay as written and are
    listed after the derived ones."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(command, eval_str=True)
        own = [p.replace(kind=p.KEYWORD_ONLY) for name, p in signature.parameters.items() if name != "overrides"]
        derived = [
            inspect.Parameter(
                option.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=None,
                annotation=Annotated[
                    (option.kind or cli_type(describe(model, option.path).annotation)) | None,
                    typer.Option(*option.decls, help=option_help(model, option), show_default=False),
                ],
            )
            for option in flags
        ]
        clashes = {p.name for p in own} & {p.name for p in derived}
        if clashes or len({p.name for p in derived}) != len(derived):
            raise TypeError(f"{command.__name__}: option names declared twice: {sorted(clashes)}")

        @functools.wraps(command)
        def run(**values: Any) -> Any:
            given = {option.name: values.pop(option.name) for option in flags}
            return command(overrides=overrides_from(flags, given), **values)

        parameters = derived + own
        run.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in parameters}
        run.config_flags = (model, tuple(flags))  # type: ignore[attr-defined]  # read by the help tests
        return run

    return decorate


# -- the model options every command that talks to a model shares, so `--backend ...` means one thing --------

_LLM_DECLS = {"model": ("--model", "-m"), "timeout_s": ("--timeout",)}


def llm_flags(*names: str, section: str = "llm.") -> list[Flag]:
    """Flags of `LLMConfig` fields (`section` = where the command's config keeps it; "" for an LLMConfig)."""
    unknown = set(names) - set(LLMConfig.model_fields)
    if unknown:
        raise TypeError(f"not LLMConfig fields: {sorted(unknown)}")
    return [flag(section + name, *_LLM_DECLS.get(name, ())) for name in names]


def tracking_flags() -> list[Flag]:
    """`--report-to`, `--run-name`, `--tracker-project`: the `TrackingSettings` fields of learn, eval and experiment."""
    return [flag("report_to"), flag("run_name"), flag("tracker_project")]


def sampling_flags(section: str, *names: str, label: str = "") -> list[Flag]:
    """`--temperature`, `--top-p`, `--max-tokens` of a `SamplingParams` section of the command's config."""
    return [flag(f"{section}.{name}", label=label) for name in names]
