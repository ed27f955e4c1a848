"""Settings of `tfgrpo mcp`: one pydantic model, read from the command line and YAML alike."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

LOOPBACK_NAMES = {"localhost"}


class McpConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    library: Path = Field(..., description="Library JSON to serve; watched and hot-reloaded when it changes.")
    transport: Literal["stdio", "http"] = Field(
        "stdio",
        description="stdio: the MCP client starts this command and talks over its stdin/stdout; http: streamable "
        "HTTP at http://HOST:PORT/mcp.",
    )
    host: str = Field("127.0.0.1", description="Address to listen on (http).")
    port: int = Field(8765, ge=0, le=65535, description="Port to listen on (http).")
    client_keys: Path | None = Field(
        None,
        description="File of client API keys, one per line: the key itself or sha256:HEX of it ('#' starts a "
        "comment), as `tfgrpo serve` reads them. Set: every HTTP request needs `Authorization: Bearer KEY` (else "
        "401). Needed to listen on an address other than loopback.",
    )
    traces: str | None = Field(
        None,
        description="Trace store (a SQLite file or a SQLAlchemy URL, the one `tfgrpo serve` writes): set, the "
        "record_outcome tool stores each outcome there for `tfgrpo learn --from-traces`.",
    )
    store_dir: Path | None = Field(
        None, description="Vector store folder of the top-k index (default: in memory, embedded at start)."
    )
    default_k: int = Field(5, ge=1, description="Experiences relevant_experiences returns when the client gives no k.")
    max_k: int = Field(50, ge=1, description="The largest k a client may ask relevant_experiences for.")
    max_task_chars: int = Field(
        8_000,
        ge=1,
        description="The longest task description (and answer or gold answer) a tool accepts, in characters.",
    )
    max_request_bytes: int = Field(
        1_000_000, ge=1_024, description="The largest HTTP request body accepted, in bytes (http)."
    )
    reward_min: float = Field(0.0, description="Smallest reward record_outcome accepts.")
    reward_max: float = Field(1.0, description="Largest reward record_outcome accepts.")
    reload_interval_s: float = Field(
        1.0, gt=0, description="Seconds between checks of the library file; a changed file is served from then on."
    )

    @model_validator(mode="after")
    def _consistent(self) -> McpConfig:
        if self.default_k > self.max_k:
            raise ValueError(f"default_k ({self.default_k}) must not exceed max_k ({self.max_k})")
        if self.reward_min >= self.reward_max:
            raise ValueError(f"reward_min ({self.reward_min:g}) must be below reward_max ({self.reward_max:g})")
        if self.transport == "stdio" and self.client_keys is not None:
            raise ValueError("client_keys guard the http transport; over stdio the client owns the process (drop it)")
        if self.transport == "http" and self.client_keys is None and not is_loopback(self.host):
            raise ValueError(
                f"listening on {self.host} needs client_keys: without them anyone who reaches it may call it"
            )
        return self


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
