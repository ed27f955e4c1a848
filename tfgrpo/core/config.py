"""Typed configuration: pydantic models filled from a YAML file, then overridden by the command line.

Every run's settings are one pydantic model with `extra="forbid"`, so an unknown key or a bad value
fails with a message that names the key. The CLI passes only options the user actually gave (typer
defaults are `None`), so the YAML file supplies the rest and the command line wins.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import BaseModel, BeforeValidator, SecretStr, ValidationError

from tfgrpo.core.textfile import read_text

ModelT = TypeVar("ModelT", bound=BaseModel)


def _masked_is_unset(value: Any) -> Any:
    # A saved config.yaml holds the key masked ('**********' from SecretStr, '***' from older runs):
    # reading it back must mean "no key given here", so --api-key or the environment supplies it.
    if isinstance(value, str) and value and set(value) == {"*"}:
        return None
    return value


SecretKey = Annotated[SecretStr | None, BeforeValidator(_masked_is_unset)]
"""An API key or token: never printed, dumped or logged in clear; read it with `.get_secret_value()`."""


def secret_value(secret: SecretStr | None) -> str | None:
    """The clear text of a `SecretKey` field, or None when none was given."""
    return None if secret is None else secret.get_secret_value()


class ConfigError(ValueError):
    """A configuration file or option is wrong; the message names the key and the fix."""


def format_validation_error(error: ValidationError, *, source: str = "config") -> str:
    lines = [f"invalid {source}:"]
    for item in error.errors():
        key = ".".join(str(p) for p in item["loc"])
        if item["type"] == "extra_forbidden":
            lines.append(f"  - unknown key '{key}'")
        elif not key:  # a check across fields: its message says it all (the input is the whole config)
            lines.append(f"  - {item['msg'].removeprefix('Value error, ')}")
        else:
            got = repr(item.get("input"))
            lines.append(f"  - {key}: {item['msg']} (got {got if len(got) <= 80 else got[:77] + '...'})")
    return "\n".join(lines)


#: Aliases (`*name`) a config may use. Each one is a shared reference; nested anchors make a 297-byte file
#: expand to gigabytes when it is validated or written back (an "alias bomb"). Real configs use none or few.
MAX_YAML_ALIASES = 16


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing duplicate keys (last-wins silently otherwise) and alias bombs."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.aliases = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_YAML_ALIASES:
                mark = self.peek_event().start_mark
                raise ConfigError(f"line {mark.line + 1}: more than {MAX_YAML_ALIASES} YAML aliases (*name): refused")
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise ConfigError(f"line {line}: duplicate key {key!r} (first at line {seen[key]})")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def load_yaml_text(text: str) -> Any:
    """YAML from a config or recipe: duplicate keys and more than MAX_YAML_ALIASES aliases are ConfigErrors."""
    return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 -- a SafeLoader subclass


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
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
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


def dump_config(config: BaseModel) -> str:
    """YAML of a resolved config with secrets removed (for the run directory).

    `SecretKey` fields dump masked by pydantic; `_scrub` also masks any other key-, token- or
    password-named value (e.g. inside a free-form dict), so the file never holds a secret.
    """
    data = config.model_dump(mode="json")
    _scrub(data)
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def _scrub(data: Any) -> None:
    if isinstance(data, dict):
        for key in list(data):
            if "api_key" in key.lower() or key.lower() in {"token", "password", "secret"}:
                data[key] = None if data[key] is None else "***"
            else:
                _scrub(data[key])
    elif isinstance(data, list):
        for item in data:
            _scrub(item)


__all__ = [
    "ConfigError",
    "SecretKey",
    "build_config",
    "deep_merge",
    "drop_unset",
    "dump_config",
    "format_validation_error",
    "read_yaml",
    "secret_value",
]
