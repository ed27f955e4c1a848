"""Settings of `tfgrpo serve`: one pydantic model, read from the command line and YAML alike."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from tfgrpo.core.secrets import SecretKey, mask_url, refuse_url_credentials
from tfgrpo.experiences.render import Injection
from tfgrpo.llm.config import BackendName, LLMConfig
from tfgrpo.serve.deploy_settings import DeploymentSettings

#: `--upstream llm:BACKEND[:MODEL]`: a backend of the client layer instead of an HTTP server
LLM_PREFIX = "llm:"
#: LLMConfig fields an `llm:` upstream takes from elsewhere (the spec, or serve's own option of that name)
LLM_FIELDS_SET_ELSEWHERE = {"backend", "model", "api_key", "timeout_s", "max_retries"}


class ServeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    library: Path = Field(..., description="Library JSON to inject; watched and hot-reloaded when it changes.")
    upstream: list[str] = Field(
        ...,
        min_length=1,
        description="OpenAI-compatible base URL(s), e.g. http://127.0.0.1:8080/v1 (several: least-busy routing), "
        "or one backend of the client layer: llm:BACKEND[:MODEL], e.g. llm:llamacpp (the embedded SmolLM2), "
        "llm:litellm:gpt-4o-mini.",
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
    topk_index: bool = Field(
        False,
        description="Embed the library at load and at every reload so requests may ask `x-tfgrpo-inject: topk:K` "
        "(on whenever inject is topk:K); without the index such a request gets 400. A request never embeds the "
        "library.",
    )
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
    max_request_bytes: int = Field(
        8 * 1024 * 1024,
        ge=1024,
        description="Largest chat request body accepted, in bytes; a larger one gets 413 before it is read whole.",
    )
    max_feedback_bytes: int = Field(
        64 * 1024, ge=1024, description="Largest body of any other route (feedback), in bytes; larger: 413."
    )
    max_header_bytes: int = Field(
        32 * 1024,
        ge=1024,
        description="Largest request line (path, query) plus headers, in bytes; larger: 431, refused while it "
        "arrives (never held whole).",
    )
    header_timeout_s: float = Field(
        10.0,
        gt=0,
        description="Seconds a request line and its headers may take to arrive once the connection is ready for "
        "them; slower: 408 and the connection closed (an idle connection is closed silently).",
    )
    body_timeout_s: float = Field(
        30.0, gt=0, description="Seconds a request body may take to arrive whole; a stalled client gets 408."
    )
    max_json_depth: int = Field(
        100, ge=8, le=500, description="Deepest nesting of arrays/objects accepted in a JSON body; deeper: 400."
    )
    max_choices: int = Field(
        16,
        ge=1,
        le=128,
        description="Largest `n` (and `best_of`) a chat request may ask for; more: 400. Every other sampling "
        "field is held to the OpenAI API's range (docs/serving.md).",
    )
    max_reply_bytes: int = Field(
        16 * 1024 * 1024,
        ge=1024,
        description="Largest whole (JSON) reply read from the upstream, in bytes (room for logprobs: about 2 KB a "
        "token with top_logprobs 20); larger: 502 upstream_reply_too_large (not retried), never read whole. With an llm: upstream, the "
        "reply's messages are measured once the backend returns them.",
    )
    max_stream_bytes: int = Field(
        64 * 1024 * 1024,
        ge=1024,
        description="Most bytes of one streamed reply passed on; there the stream is ended with an error event "
        "and data: [DONE], and traced as cut (502 upstream_reply_too_large).",
    )
    max_error_bytes: int = Field(
        64 * 1024,
        ge=1024,
        description="Largest upstream error body passed on, in bytes; a larger one is replaced by an error object "
        "of ours (same status, code upstream_error_too_large).",
    )
    max_trace_chars: int = Field(
        1024 * 1024,
        ge=1024,
        description="Most characters a trace row stores of each of: the messages (as JSON), the reply, the other "
        "choices; a longer one is cut, and its full length recorded in the row's `truncated` column.",
    )
    shutdown_grace_s: float = Field(
        30.0,
        gt=0,
        description="On SIGTERM / SIGINT, seconds running requests (streams) get to finish; then they are cut, "
        "and traced and logged as cut (503 cut_by_shutdown).",
    )
    reward_min: float = Field(0.0, description="Smallest reward /v1/feedback accepts (a gold answer is scored).")
    reward_max: float = Field(1.0, description="Largest reward /v1/feedback accepts.")
    feedback_wait_s: float = Field(
        1.0,
        ge=0,
        description="Seconds /v1/feedback keeps looking for an exchange id it cannot find yet (another worker or "
        "replica may have served it and not written its trace yet: trace writers write every 0.1 s); then 404.",
    )
    workers: int = Field(
        1,
        ge=1,
        le=64,
        description="Worker processes sharing the port. Arms stay sticky (a hash of the user key), every worker "
        "hot-reloads the library, /metrics adds up all workers; /health and /ready answer for the worker asked.",
    )
    metrics_dir: Path | None = Field(
        None,
        description="With workers > 1: the folder for prometheus_client's per-process metric files, serve's "
        "own (a folder holding other files is refused; its earlier run's metric files are removed at start; "
        "default: a temporary folder, removed at exit).",
    )
    access_log: bool = Field(
        True,
        description="One JSON line per request on stderr (route, status, latency, arm, library version and hash, "
        "exchange id, upstream attempts); never a key, an Authorization header or a message.",
    )
    ready_timeout_s: float = Field(
        2.0, gt=0, description="Seconds /ready (and /health) wait for the upstream and the trace store to answer."
    )
    client_keys: Path | None = Field(
        None,
        description="File of client API keys, one per line: the key itself or sha256:HEX of it ('#' starts a "
        "comment). Set: every /v1/ route needs `Authorization: Bearer KEY` (else 401).",
    )
    admin_keys: Path | None = Field(
        None,
        description="File of admin keys, same format as client_keys (needs client_keys): client keys that may "
        "rate any exchange, and whose user header (arm_key_header) spreads the users they front over both arms. "
        "A plain client key rates only its own exchanges, and its arm follows the key, not the header.",
    )
    forward_client_auth_header: bool = Field(
        False,
        description="Send each client's own Authorization header upstream instead of the server's key (never "
        "logged or traced); a request without one gets 401.",
    )
    cors_origins: list[str] = Field(
        [],
        description="Browser origins allowed to call the API cross-origin (CORS), e.g. https://app.example.com; "
        "'*' allows any. Empty (default): no CORS headers, so browsers on other origins are refused. Preflight "
        "OPTIONS requests are answered before the client-key check (a browser sends no key with them).",
    )
    deployment: DeploymentSettings = Field(
        default_factory=DeploymentSettings,
        description="Champion, challenger and the sequential test that decides between them (off by default).",
    )
    llm: LLMConfig | None = Field(
        None,
        description="More client-layer settings of an llm: upstream (base_url, concurrency, prices, dtype, ...); "
        "backend and model come from the upstream spec, api_key/timeout_s/max_retries from serve's own options.",
    )

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
    def _http_urls_or_one_llm(cls, value: list[str]) -> list[str]:
        specs = [url for url in value if url.startswith(LLM_PREFIX)]
        if specs:
            if len(value) > 1:
                raise ValueError("an llm: upstream must be the only upstream")
            backend = specs[0].removeprefix(LLM_PREFIX).split(":", 1)[0]
            if backend not in get_args(BackendName):
                raise ValueError(
                    f"upstream {specs[0]!r}: backend {backend!r} is not one of {', '.join(get_args(BackendName))} "
                    "(write llm:BACKEND[:MODEL])"
                )
            return value
        for url in value:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"upstream {mask_url(url)!r} is neither an http(s) URL nor llm:BACKEND[:MODEL]")
            refuse_url_credentials(url)  # the key goes in api_key; traces and /health name the upstream URL
        return [url.rstrip("/") for url in value]

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _one_or_many_origins(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, value: list[str]) -> list[str]:
        for origin in value:
            if origin != "*" and (not origin.startswith(("http://", "https://")) or origin.rstrip("/").count("/") > 2):
                raise ValueError(f"cors origin {origin!r} is not '*' or scheme://host[:port] (no path)")
        return [origin.rstrip("/") for origin in value]

    @field_validator("reward")
    @classmethod
    def _known_reward(cls, value: str) -> str:
        from tfgrpo.rewards.registry import REWARD_NAMES  # here: the config module stays light to import

        if value not in REWARD_NAMES:
            raise ValueError(f"unknown reward {value!r}; choose one of: {', '.join(REWARD_NAMES)}")
        return value

    @field_validator("traces")
    @classmethod
    def _usable_trace_store(cls, value: str) -> str:
        """A SQLite path whose folder can hold it, or a SQLAlchemy URL of a database we have a driver for."""
        if "://" in value:
            scheme = value.split("://", 1)[0].split("+", 1)[0]
            if scheme not in ("sqlite", "postgresql"):
                raise ValueError(f"traces {mask_url(value)!r}: use a SQLite file path or a postgresql+psycopg:// URL")
            return value
        path = Path(value)
        if path.is_dir():
            raise ValueError(f"traces {value!r} is a folder; give the trace store a file path")
        blocking = next((parent for parent in path.parents if parent.exists()), None)
        if blocking is not None and not blocking.is_dir():
            raise ValueError(f"traces {value!r}: {blocking} is a file, so the trace store cannot go under it")
        return value

    @model_validator(mode="after")
    def _reward_bounds_in_order(self) -> ServeConfig:
        if self.reward_min >= self.reward_max:
            raise ValueError(f"reward_min ({self.reward_min:g}) must be below reward_max ({self.reward_max:g})")
        return self

    @model_validator(mode="after")
    def _one_store_per_process(self) -> ServeConfig:
        if self.workers > 1 and self.store_dir is not None and self.keeps_topk_index:
            raise ValueError(
                "store_dir: each worker builds its own top-k index, and a chromadb folder is one process's; "
                "leave store_dir unset with workers > 1 (each worker keeps its index in memory)"
            )
        return self

    @model_validator(mode="after")
    def _deployment_injects_whole_versions(self) -> ServeConfig:
        if self.deployment.enabled and self.keeps_topk_index:
            raise ValueError(
                "deployment.enabled serves whole versions (inject all): a top-k index is kept for one library "
                "file, not for each champion and challenger; drop topk_index / inject topk:K"
            )
        return self

    @model_validator(mode="after")
    def _admins_are_client_keys(self) -> ServeConfig:
        if self.admin_keys is not None and self.client_keys is None:
            raise ValueError("admin_keys needs client_keys: an admin key is a client key with more rights")
        return self

    @model_validator(mode="after")
    def _one_way_to_authenticate(self) -> ServeConfig:
        if not self.forward_client_auth_header:
            return self
        if self.client_keys is not None:
            raise ValueError(
                "client_keys and forward_client_auth_header both read the client's Authorization header: choose one "
                "(client keys authenticate clients to this server; forwarding lets the upstream authenticate them)"
            )
        if self.api_key is not None:
            raise ValueError(
                "forward_client_auth_header sends each client's own key upstream, so api_key would never be used"
            )
        if self.llm_spec is not None:
            raise ValueError("forward_client_auth_header needs an HTTP upstream: an llm: upstream holds its own key")
        return self

    @model_validator(mode="after")
    def _llm_settings_where_they_apply(self) -> ServeConfig:
        if self.llm_spec is None:
            if self.llm is not None:
                raise ValueError("llm: settings apply only to an llm:BACKEND[:MODEL] upstream")
            return self
        if self.model is not None:
            raise ValueError("model: an llm: upstream names its model in the spec (llm:BACKEND:MODEL)")
        elsewhere = sorted(LLM_FIELDS_SET_ELSEWHERE & (self.llm.model_fields_set if self.llm else set()))
        if elsewhere:
            raise ValueError(
                f"llm.{', llm.'.join(elsewhere)}: set by the upstream spec (backend, model) or serve's own "
                "api_key / timeout_s / max_retries"
            )
        return self

    @property
    def keeps_topk_index(self) -> bool:
        """Whether the library is embedded at load and reload (topk:K injection possible)."""
        return self.topk_index or Injection.parse(self.inject).mode == "topk"

    @property
    def llm_spec(self) -> str | None:
        """The `llm:BACKEND[:MODEL]` upstream, if that is the upstream."""
        return self.upstream[0] if self.upstream[0].startswith(LLM_PREFIX) else None

    def llm_config(self, api_key: str | None) -> LLMConfig:
        """The client layer's settings of the llm: upstream (`api_key`: the resolved upstream key, if any)."""
        if self.llm_spec is None:
            raise ValueError("the upstream is not llm:BACKEND[:MODEL]")
        backend, _, model = self.llm_spec.removeprefix(LLM_PREFIX).partition(":")
        base = self.llm or LLMConfig()
        return base.model_copy(
            update={
                "backend": backend,
                "model": model or None,
                "api_key": SecretStr(api_key) if api_key else None,
                "timeout_s": self.timeout_s,
                "max_retries": self.max_retries,
            }
        )
