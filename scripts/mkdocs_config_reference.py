"""mkdocs hook: configuration reference tables generated from the config classes at build time.

A page writes a marker such as

    <!-- config-reference: tfgrpo.learn.config.LearnConfig -->

and the build replaces it with a heading, the class's docstring and one table row per field (key, type,
default, description), read from the pydantic model (`Field(description=...)`) or, for the fine-tuning
configs, from the dataclass fields our classes declare (`metadata["help"]`). A nested pydantic model
(`llm: LLMConfig`) links to its own table, which is appended to the page unless a marker placed it.
A marker naming a class that no longer exists fails the build, so the reference cannot go stale.

`<!-- cli-reference: tfgrpo.cli.app.app -->` does the same for the command line: one section per
command of the typer app (sub-commands included) with its help and a table of its options and arguments.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any

import yaml
from mkdocs.exceptions import PluginError
from pydantic import BaseModel

MARKER = re.compile(r"^<!--\s*config-reference:\s*(?P<path>[\w.]+)\s*-->\s*$", re.MULTILINE)
CLI_MARKER = re.compile(r"^<!--\s*cli-reference:\s*(?P<path>[\w.]+)\s*-->\s*$", re.MULTILINE)
OUR_PACKAGES = ("tfgrpo",)
CONSTRAINTS = {"Ge": "≥", "Gt": ">", "Le": "≤", "Lt": "<"}


class ConfigReferenceError(PluginError):
    """A marker names a class that cannot be imported or is not a config class."""


def on_config(config: Any) -> Any:
    # Document this checkout, not whatever copy of the packages the environment has installed.
    root = str(Path(config.config_file_path).resolve().parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    return config


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    return render_markers(CLI_MARKER.sub(lambda match: cli_sections(match["path"]), markdown))


def render_markers(markdown: str) -> str:
    """`markdown` with every config-reference marker replaced by its tables (nested models appended)."""
    placed = [resolve(match["path"]) for match in MARKER.finditer(markdown)]
    if not placed:
        return markdown
    rendered: set[type] = set(placed)
    pending: list[type] = []

    def section(match: re.Match[str]) -> str:
        return class_section(resolve(match["path"]), pending)

    markdown = MARKER.sub(section, markdown)
    appended: list[str] = []
    while pending:
        nested = pending.pop(0)
        if nested not in rendered:
            rendered.add(nested)
            appended.append(class_section(nested, pending))
    return markdown.rstrip("\n") + ("\n\n" + "\n\n".join(appended) if appended else "") + "\n"


def import_object(path: str) -> Any:
    module_name, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module_name), name)


def resolve(path: str) -> type:
    try:
        cls = import_object(path)
    except (ImportError, AttributeError, RuntimeError) as exc:  # RuntimeError: a lazy module (trl) failing
        raise ConfigReferenceError(f"config-reference: cannot import {path} ({exc}); fix the marker") from exc
    if not (is_model(cls) or dataclasses.is_dataclass(cls)):
        raise ConfigReferenceError(f"config-reference: {path} is neither a pydantic model nor a dataclass")
    return cls


def anchor(cls: type) -> str:
    return cls.__name__.lower()


def class_section(cls: type, pending: list[type]) -> str:
    doc = inspect.cleandoc(cls.__doc__ or "").split("\n\n")[0].replace("\n", " ")
    if is_model(cls) and doc.startswith("Usage docs:"):  # pydantic's own BaseModel docstring
        doc = ""
    path = f"`{cls.__module__}.{cls.__name__}`" + (f": {doc}" if doc else "")
    head = f"### {cls.__name__} {{ #{anchor(cls)} }}\n\n{path}"
    rows = model_rows(cls, pending) if is_model(cls) else dataclass_rows(cls, pending)
    table = "| key | type | default | description |\n|---|---|---|---|\n" + "\n".join(
        "| " + " | ".join(cell(value) for value in row) + " |" for row in rows
    )
    body = table + "\n" if rows else "No fields of its own.\n"
    return head + "\n\n" + body + inherited_note(cls)


def model_rows(cls: type[BaseModel], pending: list[type]) -> list[tuple[str, str, str, str]]:
    rows = []
    for name, field in cls.model_fields.items():
        description = field.description or ""
        nested = nested_model(field.annotation)
        if nested is not None:
            pending.append(nested)
            link = f"[{nested.__name__}](#{anchor(nested)})"
            description = f"{description} (see {link})" if description else f"See {link}."
        constraint = " ".join(
            f"{symbol} {getattr(m, kind.lower())}"
            for m in field.metadata
            for kind, symbol in CONSTRAINTS.items()
            if type(m).__name__ == kind
        )
        type_text = f"`{type_name(field.annotation)}`" + (f" {constraint}" if constraint else "")
        if field.is_required():
            default = "required"
        else:
            default = format_default(field.get_default(call_default_factory=True))
        rows.append((f"`{name}`", type_text, default, description))
    return rows


def dataclass_rows(cls: type, pending: list[type]) -> list[tuple[str, str, str, str]]:
    """The fields our own classes declare (TRL's hundreds of inherited ones are referred to, not listed).

    A mixin of ours (a base that does not extend the upstream config, e.g. `AdapterArguments`) gets its own
    table, linked from the note below this one instead of being repeated in every method's table."""
    upstream = upstream_base(cls)
    ours = [base for base in reversed(cls.__mro__) if base.__module__.split(".")[0] in OUR_PACKAGES]
    mixins = [base for base in ours if base is not cls and upstream is not None and not issubclass(base, upstream)]
    pending.extend(mixins)
    declared = {name for base in ours if base not in mixins for name in inspect.get_annotations(base)}
    upstream_defaults = {f.name: field_default(f) for f in dataclasses.fields(upstream)} if upstream else {}
    rows = []
    for field in dataclasses.fields(cls):
        if field.name not in declared:
            continue
        default = field_default(field)
        description = field.metadata.get("help", "")
        if field.name in upstream_defaults and upstream_defaults[field.name] != default:
            description += f" (TRL's default: {format_default(upstream_defaults[field.name])})"
        rows.append((f"`{field.name}`", f"`{type_name(field.type)}`", format_default(default), description))
    return rows


def inherited_note(cls: type) -> str:
    upstream = upstream_base(cls)
    if upstream is None:
        return ""
    package = upstream.__module__.split(".")[0]
    version = getattr(sys.modules.get(package), "__version__", "")
    built_with = f" ({package} {version} at build time)" if version else ""
    public = sys.modules.get(package)
    name = (
        f"{package}.{upstream.__name__}"
        if getattr(public, upstream.__name__, None) is upstream
        else (f"{upstream.__module__}.{upstream.__name__}")
    )
    mixins = [
        base
        for base in cls.__mro__[1:]
        if base.__module__.split(".")[0] in OUR_PACKAGES
        and dataclasses.is_dataclass(base)
        and not issubclass(base, upstream)
    ]
    parts = [f"the fields of [{base.__name__}](#{anchor(base)})" for base in mixins]
    parts.append(f"every field of `{name}`{built_with}")
    return f"\nAlso accepted: {' and '.join(parts)}.\n"


def upstream_base(cls: type) -> type | None:
    """The first third-party dataclass a config extends (e.g. `trl.SFTConfig`), if any."""
    for base in cls.__mro__[1:]:
        if dataclasses.is_dataclass(base) and base.__module__.split(".")[0] not in OUR_PACKAGES:
            return base
    return None


def field_default(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


def is_model(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, BaseModel)


def nested_model(annotation: Any) -> type[BaseModel] | None:
    if is_model(annotation):
        return annotation
    for argument in typing.get_args(annotation):
        found = nested_model(argument)
        if found is not None:
            return found
    return None


def type_name(annotation: Any) -> str:
    if isinstance(annotation, str):
        return annotation
    if annotation is type(None):
        return "None"
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__name__
    origin = typing.get_origin(annotation)
    arguments = typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in arguments)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in arguments)
    if origin is not None:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(type_name(a) for a in arguments)}]"
    return re.sub(r"\b(?:[A-Za-z_]\w*\.)+([A-Za-z_]\w*)", r"\1", str(annotation).replace("typing.", ""))


def format_default(value: Any) -> str:
    if value is dataclasses.MISSING:
        return "required"
    if isinstance(value, BaseModel):  # a small model in full; a large one only where it differs from its defaults
        full = value.model_dump(mode="json")
        value = full if len(full) <= 6 else value.model_dump(mode="json", exclude_defaults=True)
        if not value:
            return "its defaults"
    if isinstance(value, tuple):
        value = list(value)
    try:
        text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10_000)
        text = text.strip().removesuffix("...").strip()  # a plain scalar ends with YAML's document end marker
    except yaml.YAMLError:  # an object YAML cannot write (an enum, a path): its repr says enough
        text = repr(value)
    return f"`{text}`"


def cell(text: str) -> str:
    """One table cell: on one line, with `|` escaped outside code spans (inside them it is literal)."""
    parts = " ".join(str(text).split()).split("`")
    return "`".join(part if index % 2 else part.replace("|", "\\|") for index, part in enumerate(parts))


def cli_sections(path: str) -> str:
    """One section per command of the typer app at `path`, depth first, in the order `--help` lists them."""
    import typer.main  # the docs build needs typer only for a page that has a cli-reference marker

    try:
        root = typer.main.get_command(import_object(path))
    except (ImportError, AttributeError, RuntimeError) as exc:
        raise ConfigReferenceError(f"cli-reference: cannot import {path} ({exc}); fix the marker") from exc
    sections: list[str] = []

    def walk(command: Any, name: str) -> None:
        # click's group API, not `.commands`: tfgrpo's groups load their commands when asked (tfgrpo/cli/lazy.py)
        names = command.list_commands(None) if hasattr(command, "list_commands") else []
        subcommands = {sub_name: command.get_command(None, sub_name) for sub_name in names}
        if name != root.name or not subcommands:
            sections.append(command_section(command, name))
        for sub_name, sub in subcommands.items():
            walk(sub, f"{name} {sub_name}")

    walk(root, root.name or "tfgrpo")
    return "\n\n".join(sections)


def command_section(command: Any, name: str) -> str:
    from rich.text import Text  # comes with typer, needed only here
    from typer.core import MARKUP_MODE_KEY

    # In rich mode typer escapes the `[default: ...]` it appends, so the whole help reads as markup.
    context = command.context_class(command, info_name=name.split()[-1], obj={MARKUP_MODE_KEY: "rich"})
    help_text = inspect.cleandoc(command.help or "").split("\n\n")[0].replace("\n", " ")
    rows = []
    for param in command.params:
        if getattr(param, "hidden", False):
            continue
        record = param.get_help_record(context)
        if record is None:  # an argument: click lists it in the usage line only
            rows.append((f"`{param.name.upper()}`", "argument" + ("" if param.required else " (optional)")))
        else:  # help is typer's rich markup (defaults in `[dim]`, escaped brackets): the text `--help` shows
            rows.append((f"`{record[0]}`", Text.from_markup(record[1]).plain))
    table = "| option | meaning |\n|---|---|\n" + "\n".join(f"| {cell(a)} | {cell(b)} |" for a, b in rows)
    subcommands = getattr(command, "commands", {})
    if subcommands:
        table = "Sub-commands: " + ", ".join(f"`{name} {sub}`" for sub in subcommands) + "."
    return f"### `{name}`\n\n{help_text}\n\n{table}\n"
