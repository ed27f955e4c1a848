"""Typed configuration: pydantic models filled from a YAML file, then overridden by the command line.

Every run's settings are one pydantic model with `extra="forbid"`, so an unknown key or a bad value
fails with a message that names the key. The CLI passes only options the user actually gave (typer
defaults are `None`), so the YAML file supplies the rest and the command line wins.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from tfgrpo.core.secrets import MASK, SecretKey, is_secret_name, mask_url, masked, secret_value
from tfgrpo.core.textfile import LONE_SURROGATE, read_text

ModelT = TypeVar("ModelT", bound=BaseModel)


class ConfigError(ValueError):
    """A configuration file or option is wrong; the message names the key and the fix."""


def format_validation_error(error: ValidationError, *, source: str = "config") -> str:
    """One line for one problem (`invalid config x.yaml: unknown key 'llm.backnd'`), else one line each."""
    problems = [_problem(item) for item in error.errors()]
    if len(problems) == 1:
        return f"invalid {source}: {problems[0]}"
    return "\n".join([f"invalid {source}:", *(f"  - {problem}" for problem in problems)])


def _problem(item: Any) -> str:
    key = ".".join(str(p) for p in item["loc"])
    if item["type"] == "extra_forbidden":
        return f"unknown key '{key}'"
    message = mask_url(item["msg"].removeprefix("Value error, "))  # a URL a validator quotes keeps no password
    if not key:  # a check across fields: its message says it all (the input is the whole config)
        return message
    if item["type"] == "value_error":  # our own validators' messages name what they got
        return f"{key}: {message}"
    # the input as a written config would show it: a key given in the wrong form must not be echoed
    got = repr(MASK if is_secret_name(str(item["loc"][-1])) else masked(item.get("input")))
    return f"{key}: {message} (got {got if len(got) <= 80 else got[:77] + '...'})"


#: Aliases (`*name`) a config may use. Each one is a shared reference; nested anchors make a 297-byte file
#: expand to gigabytes when it is validated or written back (an "alias bomb"). Real configs use none or few.
MAX_YAML_ALIASES = 16


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing duplicate keys (last-wins silently otherwise) and alias bombs."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.aliases = 0
        self.open_anchors: set[str] = set()  # anchors of the nodes being composed: the ancestors of this one

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            self.aliases += 1
            line = event.start_mark.line + 1
            if self.aliases > MAX_YAML_ALIASES:
                raise ConfigError(f"line {line}: more than {MAX_YAML_ALIASES} YAML aliases (*name): refused")
            # `a: &a [*a]` is a structure that holds itself: validating or writing it recurses without end.
            if event.anchor in self.open_anchors:
                raise ConfigError(
                    f"line {line}: the alias *{event.anchor} is inside its own anchor (a cycle): refused"
                )
        anchor = None if isinstance(event, yaml.AliasEvent) else getattr(event, "anchor", None)
        if anchor is None:
            return super().compose_node(parent, index)
        self.open_anchors.add(anchor)
        try:
            return super().compose_node(parent, index)
        finally:
            self.open_anchors.discard(anchor)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise ConfigError(f"line {line}: duplicate key {key!r} (first at line {seen[key]})")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)

    def construct_scalar(self, node: Any) -> Any:
        value = super().construct_scalar(node)
        if isinstance(value, str) and LONE_SURROGATE.search(value):  # "\ud800": no prompt or file can hold it
            raise ConfigError(
                f"line {node.start_mark.line + 1}: a lone surrogate escape (\\ud800-\\udfff) is not a character"
            )
        return value


def load_yaml_text(text: str) -> Any:
    """YAML from a config or recipe: duplicate keys and more than MAX_YAML_ALIASES aliases are ConfigErrors."""
    return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 -- a SafeLoader subclass


def load_yaml_value(text: str, *, option: str, error: type[Exception] = ConfigError) -> Any:
    """A value given on the command line (`-p rel_tol=0.01`, `--set beta=0.2`), read by the configs' loader: an
    alias bomb or a duplicate key is refused there as in a file. `option` (`--set 'beta=[1'`) starts the error."""
    try:
        return load_yaml_text(text)
    except ConfigError as exc:
        raise error(f"{option}: the value is refused: {exc}") from None
    except yaml.YAMLError as exc:
        raise error(f"{option}: the value is {yaml_error_line(exc)}") from None


def yaml_error_line(error: yaml.YAMLError) -> str:
    """PyYAML's several-line report (with a caret drawing) as one line: where, then what."""
    mark = getattr(error, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    context = getattr(error, "context", None)
    return f"not valid YAML{where}: {problem}" + (f" ({context})" if context else "")


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    text = read_text(path, error=ConfigError)  # bad bytes: one line naming file, line and column
    try:
        data = load_yaml_text(text) or {}
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: {yaml_error_line(exc)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys to values")
    return data


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def drop_unset(values: dict[str, Any]) -> dict[str, Any]:
    """Keep only the options the user gave (None and empty tuples mean 'not given')."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            nested = drop_unset(value)
            if nested:
                out[key] = nested
        elif value is not None and value != () and value != []:
            out[key] = list(value) if isinstance(value, tuple) else value
    return out


def nested_defaults(model_cls: type[BaseModel]) -> dict[str, Any]:
    """The defaults of every sub-model field, as dicts.

    A partial section (`sampling: {max_tokens: 64}`) must be laid over the *field's* default (say,
    temperature 0 for the stages), not over the sub-model's class defaults, which pydantic would use.
    """
    from pydantic_core import PydanticUndefined

    out: dict[str, Any] = {}
    for name, field in model_cls.model_fields.items():
        if field.default_factory is not None:
            value = field.default_factory()  # type: ignore[call-arg]  # our factories take no argument
        elif field.default is not PydanticUndefined:
            value = field.default
        else:
            continue
        if isinstance(value, BaseModel):
            out[name] = value.model_dump()
    return out


def build_config(model_cls: type[ModelT], config_file: str | Path | None, overrides: dict[str, Any]) -> ModelT:
    """Field defaults < YAML file (optional) < command-line overrides, validated into `model_cls`."""
    data = read_yaml(config_file) if config_file else {}
    for key in nested_defaults(model_cls):
        if key in data and not isinstance(data[key], dict) and data[key] is not None:
            raise ConfigError(f"{config_file}: '{key}' must be a mapping of keys to values")
    data = deep_merge(nested_defaults(model_cls), data)
    data = deep_merge(data, drop_unset(overrides))
    source = f"config {config_file}" if config_file else "options"
    reject_bools_as_numbers(model_cls, data, source=source)
    try:
        return model_cls.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source=source)) from None


def reject_bools_as_numbers(model_cls: type[BaseModel], data: Any, *, source: str, prefix: str = "") -> None:
    """pydantic (lax mode) reads YAML `group_size: true` as 1: refuse a boolean wherever a number is expected.

    Strict mode for the whole model would also refuse YAML's strings for paths and enums, so only
    this one coercion is closed, for every int/float field of the model and its nested sections."""
    if not isinstance(data, dict):
        return
    for name, field in model_cls.model_fields.items():
        if name not in data:
            continue
        value, key = data[name], f"{prefix}{name}"
        kinds = _annotation_types(field.annotation)
        if isinstance(value, bool) and bool not in kinds and kinds & {int, float}:
            raise ConfigError(f"{source}: '{key}' must be a number, not {str(value).lower()}")
        for kind in kinds:
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                reject_bools_as_numbers(kind, value, source=source, prefix=f"{key}.")


def _annotation_types(annotation: Any) -> set[Any]:
    """The plain types an annotation admits (`int | None` -> {int, NoneType})."""
    args = getattr(annotation, "__args__", None)
    if (
        args
        and getattr(annotation, "__origin__", None) is not list
        and getattr(annotation, "__origin__", None) is not dict
    ):
        found: set[Any] = set()
        for arg in args:
            found |= _annotation_types(arg)
        return found
    return {annotation}


def config_dict(config: BaseModel, **dump_options: Any) -> dict[str, Any]:
    """A config as JSON-like data safe to write anywhere (run directory, metrics.json, reports).

    Secrets are a type (`SecretKey`, the SecretStr values of `SecretOptions`): they dump as MASK; `masked`
    also hides any other secret-named entry and URL credentials, so nothing that reached a config is written.
    """
    return masked(config.model_dump(mode="json", **dump_options))


def dump_config(config: BaseModel) -> str:
    """YAML of a resolved config with secrets masked (for the run directory's config.yaml)."""
    return yaml.safe_dump(config_dict(config), sort_keys=False, allow_unicode=True)


__all__ = [
    "ConfigError",
    "SecretKey",
    "build_config",
    "config_dict",
    "deep_merge",
    "drop_unset",
    "dump_config",
    "format_validation_error",
    "load_yaml_text",
    "load_yaml_value",
    "yaml_error_line",
    "read_yaml",
    "secret_value",
]
