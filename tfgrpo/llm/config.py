"""The client layer's own configuration: which backend, model, endpoints, limits and prices."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tfgrpo.core.secrets import CredentialFreeUrl, SecretKey, mask_url

BackendName = Literal["transformers", "llamacpp", "openai", "litellm", "vllm"]


class LLMConfig(BaseModel):
    """Where completions come from, shared by every command that talks to a model."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    backend: BackendName = Field("transformers", description="Which backend serves the model.")
    model: str | None = Field(
        None,
        description="Model name (API), local path / GGUF file (transformers, llamacpp, vllm). "
        "None = the embedded SmolLM2-135M-Instruct.",
    )
    base_url: list[CredentialFreeUrl] = Field(
        default_factory=list,
        description="One or more OpenAI-compatible base URLs; several replicas get least-busy routing. "
        "A URL with user:password@ is refused (the key goes in api_key); a query string "
        "(?code=..., a SAS signature) is sent, and shown only as ?***.",
    )
    api_key: SecretKey = Field(None, description="API key; else OPENAI_API_KEY or the provider's variable.")
    adapter: str | None = Field(None, description="A LoRA adapter directory (transformers, vllm).")
    concurrency: int = Field(64, ge=1, description="Requests in flight at once, per endpoint.")
    max_retries: int = Field(5, ge=0, description="Retries of a transient failure (429, 5xx, timeout).")
    timeout_s: float = Field(600.0, gt=0, description="Per-request timeout in seconds.")
    cache: str | None = Field(
        None, description="SQLite response cache path; None = the run directory's cache.sqlite (or none for chat)."
    )
    price_input_per_1m: float | None = Field(
        None, ge=0, description="USD per 1M prompt tokens (else litellm's table)."
    )
    price_output_per_1m: float | None = Field(None, ge=0, description="USD per 1M completion tokens.")
    price_cached_input_per_1m: float | None = Field(
        None,
        ge=0,
        description="USD per 1M prompt tokens served from the provider's prompt cache (else the input price).",
    )
    budget_usd: float | None = Field(None, gt=0, description="Stop cleanly once this much has been spent.")
    batch_size: int = Field(32, ge=1, description="Prompts per forward pass for local backends.")
    llamacpp_instances: int = Field(
        1,
        ge=1,
        description="llamacpp backend: copies of the model decoding in parallel, one CPU thread each "
        "(weights shared by mmap); about one per core for a small model.",
    )
    dtype: str = Field("float32", description="Torch dtype of local models.")
    structured_output: Literal["auto", "on", "off"] = Field(
        "auto",
        description="JSON-schema enforcement of structured replies: auto (where the backend can; an endpoint that "
        "rejects it is used without), on (required: a backend that cannot is refused), off (never sent).",
    )

    @model_validator(mode="after")
    def _instances_only_for_llamacpp(self) -> LLMConfig:
        if self.llamacpp_instances != 1 and self.backend != "llamacpp":
            raise ValueError(f"llamacpp_instances applies to the llamacpp backend only, not {self.backend}")
        return self

    @field_validator("cache")
    @classmethod
    def _cache_is_a_file_path(cls, value: str | None) -> str | None:
        # Checked with the config, before a run directory exists; sqlite would fail later with a traceback.
        if not value or value == ":memory:":
            return value
        path = Path(value).expanduser()
        if path.is_dir():
            raise ValueError(f"{value} is a directory; give the cache a file path, e.g. {path / 'cache.sqlite'}")
        for parent in path.parents:
            if parent.exists() and not parent.is_dir():
                raise ValueError(f"{value}: {parent} is a file, so the cache cannot be created under it")
        return value

    @field_validator("base_url", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [value]
        return value

    @field_validator("base_url")
    @classmethod
    def _http_urls(cls, value: list[str]) -> list[str]:
        # Refused with the config: a URL without its scheme (`localhost:8000/v1`) or a typo was retried as a
        # connection error six times before failing.
        for url in value:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError(f"{mask_url(url)!r} is not an http(s) URL (e.g. http://127.0.0.1:8000/v1)")
        # Logs, errors, state.json and the router name a replica by its URL masked (core.secrets): two that
        # differ only in their query strings would be one replica, the other never sent a request.
        shown = [mask_url(url) for url in value]
        if len(set(shown)) < len(set(value)):
            twice = next(url for url in shown if shown.count(url) > 1)
            raise ValueError(f"{twice}: two base URLs differ only in their query strings; give one")
        return value

    @model_validator(mode="after")
    def _query_strings_only_for_openai(self) -> LLMConfig:
        # litellm appends its providers' paths to api_base as text: a query string would swallow them.
        with_query = [url for url in self.base_url if urlsplit(url).query]
        if with_query and self.backend == "litellm":
            raise ValueError(
                f"{mask_url(with_query[0])}: the litellm backend cannot send a base URL's query string; "
                "use --backend openai (it sends it with every request)"
            )
        return self
