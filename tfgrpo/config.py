"""Typed configuration: pydantic models filled from a YAML file, then overridden by the command line.

Every run's settings are one pydantic model with `extra="forbid"`, so an unknown key or a bad value
fails with a message that names the key. The CLI passes only options the user actually gave (typer
defaults are `None`), so the YAML file supplies the rest and the command line wins.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tfgrpo.llm.types import SamplingParams

BackendName = Literal["transformers", "llamacpp", "openai", "litellm", "vllm"]
ModelT = TypeVar("ModelT", bound=BaseModel)


class ConfigError(ValueError):
    """A configuration file or option is wrong; the message names the key and the fix."""


class LLMConfig(BaseModel):
    """Where completions come from, shared by every command that talks to a model."""

    model_config = ConfigDict(extra="forbid")

    backend: BackendName = Field("transformers", description="Which backend serves the model.")
    model: str | None = Field(
        None, description="Model name (API), local path / GGUF file (transformers, llamacpp, vllm). "
        "None = the embedded SmolLM2-135M-Instruct."
    )
    base_url: list[str] = Field(default_factory=list, description="One or more OpenAI-compatible base URLs.")
    api_key: str | None = Field(None, description="API key; else OPENAI_API_KEY or the provider's variable.")
    adapter: str | None = Field(None, description="A LoRA adapter directory (transformers, vllm).")
    concurrency: int = Field(64, ge=1, description="Requests in flight at once, per endpoint.")
    max_retries: int = Field(5, ge=0, description="Retries of a transient failure (429, 5xx, timeout).")
    timeout_s: float = Field(600.0, gt=0, description="Per-request timeout in seconds.")
    cache: str | None = Field(
        None, description="SQLite response cache path; None = the run directory's cache.sqlite (or none for chat)."
    )
    price_input_per_1m: float | None = Field(None, ge=0, description="USD per 1M prompt tokens (else litellm's table).")
    price_output_per_1m: float | None = Field(None, ge=0, description="USD per 1M completion tokens.")
    budget_usd: float | None = Field(None, gt=0, description="Stop cleanly once this much has been spent.")
    batch_size: int = Field(32, ge=1, description="Prompts per forward pass for local backends.")
    dtype: str = Field("float32", description="Torch dtype of local models.")
    structured_output: Literal["auto", "on", "off"] = Field(
        "auto",
        description="JSON-schema enforcement of structured replies: auto (where the backend can; an endpoint that "
        "rejects it is used without), on (required: a backend that cannot is refused), off (never sent).",
    )

    @field_validator("base_url", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [value]
        return value


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


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
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
            value = field.default_factory()
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
    try:
        return model_cls.model_validate(data)
    except ValidationError as exc:
        source = f"config {config_file}" if config_file else "options"
        raise ConfigError(format_validation_error(exc, source=source)) from None


def dump_config(config: BaseModel) -> str:
    """YAML of a resolved config with secrets removed (for the run directory)."""
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
    "BackendName",
    "ConfigError",
    "LLMConfig",
    "SamplingParams",
    "build_config",
    "deep_merge",
    "drop_unset",
    "dump_config",
    "format_validation_error",
    "read_yaml",
]
