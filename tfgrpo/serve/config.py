"""Settings of `tfgrpo serve`: one pydantic model, read from the command line and YAML alike."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from experiences.render import Injection
from tfgrpo.core.config import SecretKey


class ServeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    library: Path = Field(..., description="Library JSON to inject; watched and hot-reloaded when it changes.")
    upstream: list[str] = Field(
        ...,
        min_length=1,
        description="OpenAI-compatible base URL(s), e.g. http://127.0.0.1:8080/v1; several: least-busy routing.",
    )
    host: str = Field("127.0.0.1", description="Address to listen on.")
    port: int = Field(8000, ge=0, le=65535, description="Port to listen on (0: any free port).")
    model: str | None = Field(
        None, description="Upstream model name sent instead of the client's (default: the client's)."
    )
    api_key: SecretKey = Field(
        None, description="Upstream API key (else TFGRPO_UPSTREAM_API_KEY); never stored in traces."
    )
    inject: str = Field(
        "all", description="Default injection: all | none | topk:K; a request may send `x-tfgrpo-inject`."
    )
    store_dir: Path | None = Field(None, description="Vector store folder for topk injection (default: in-memory).")
    holdout: float = Field(0.0, ge=0.0, le=1.0, description="Share of users served WITHOUT the library (arm A).")
    arm_key_header: str = Field(
        "x-tfgrpo-user", description="Header whose value keeps a conversation in one arm (else the body's `user`)."
    )
    traces: str = Field(
        "traces.sqlite", description="Trace store: a SQLite file path or a SQLAlchemy URL (postgresql+psycopg://...)."
    )
    reward: str = Field("math", description="Reward that scores a gold answer sent to /v1/feedback.")
    timeout_s: float = Field(600.0, gt=0, description="Seconds to wait for the upstream per attempt.")
    max_retries: int = Field(
        2, ge=0, description="Retries of a 429/5xx/timeout/connection error before any byte reached the client."
    )
    backoff_s: float = Field(0.5, ge=0, description="First retry delay (exponential with jitter; Retry-After wins).")
    reload_interval_s: float = Field(1.0, gt=0, description="How often the library file is checked for a new version.")

    @field_validator("inject")
    @classmethod
    def _valid_injection(cls, value: str) -> str:
        return str(Injection.parse(value))

    @field_validator("upstream", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    @field_validator("upstream")
    @classmethod
    def _http_urls(cls, value: list[str]) -> list[str]:
        for url in value:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"upstream {url!r} is not an http(s) URL")
        return [url.rstrip("/") for url in value]
