"""Token, cost and latency accounting per call, per tag (rollout, summary, ...) and per run."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path
from typing import Any


@dataclass
class Pricing:
    """USD per 1M tokens. `known=False` means no price was given or found: cost is reported as 0.

    `cached_input_per_1m` prices the prompt tokens a provider served from its prompt cache (DeepSeek,
    OpenAI and Anthropic bill them at a fraction of the input price); None = the full input price.
    """

    input_per_1m: float = 0.0
    output_per_1m: float = 0.0
    known: bool = True
    cached_input_per_1m: float | None = None

    def cost(self, prompt_tokens: int, completion_tokens: int, cached_prompt_tokens: int = 0) -> float:
        cached = min(max(cached_prompt_tokens, 0), prompt_tokens)
        cached_rate = self.input_per_1m if self.cached_input_per_1m is None else self.cached_input_per_1m
        return (
            (prompt_tokens - cached) * self.input_per_1m
            + cached * cached_rate
            + completion_tokens * self.output_per_1m
        ) / 1_000_000


@lru_cache(maxsize=1)
def _litellm_price_table() -> dict[str, Any]:
    """litellm's bundled price table, read directly: importing litellm takes seconds and may reach the network."""
    spec = find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return {}
    path = Path(spec.submodule_search_locations[0]) / "model_prices_and_context_window_backup.json"
    return json.loads(path.read_bytes()) if path.is_file() else {}


def _litellm_entries(model: str) -> list[dict[str, Any]]:
    """The table's entries for `model`'s candidate names, best first."""
    table = _litellm_price_table()
    entries = (table.get(name) for name in _candidate_names(model))
    return [entry for entry in entries if isinstance(entry, dict)]


def resolve_pricing(
    model: str | None,
    input_per_1m: float | None,
    output_per_1m: float | None,
    *,
    local: bool,
    cached_input_per_1m: float | None = None,
) -> Pricing:
    """User prices win; local backends cost nothing; API models are looked up in litellm's table
    (`cache_read_input_token_cost` gives the cached-prompt rate; a model without one pays full price)."""
    if input_per_1m is not None or output_per_1m is not None or cached_input_per_1m is not None:
        return Pricing(input_per_1m or 0.0, output_per_1m or 0.0, cached_input_per_1m=cached_input_per_1m)
    if local:
        return Pricing()
    for entry in _litellm_entries(model or ""):
        if "input_cost_per_token" in entry:
            cached = entry.get("cache_read_input_token_cost")
            return Pricing(
                float(entry.get("input_cost_per_token", 0.0)) * 1_000_000,
                float(entry.get("output_cost_per_token", 0.0)) * 1_000_000,
                cached_input_per_1m=None if cached is None else float(cached) * 1_000_000,
            )
    return Pricing(known=False)


def context_window(model: str | None) -> int | None:
    """The model's input context in tokens from litellm's bundled table (None when unknown)."""
    for entry in _litellm_entries(model or ""):
        window = entry.get("max_input_tokens") or entry.get("max_tokens")
        if isinstance(window, int) and window > 0:
            return window
    return None


def _candidate_names(model: str) -> list[str]:
    names = [model]
    if "/" in model:
        names.append(model.split("/", 1)[1])
    return names


#: causes of a retried call, as counted in TagTotals.retries_<cause> (429, 5xx, timeout, unusable reply, connection)
RETRY_CAUSES = ("rate_limit", "server_error", "timeout", "bad_body", "connection")


@dataclass
class TagTotals:
    calls: int = 0
    samples: int = 0
    cached_samples: int = 0
    failed_calls: int = 0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0  # of prompt_tokens, served from the provider's prompt cache
    completion_tokens: int = 0
    reasoning_tokens: int = 0  # of completion_tokens, spent thinking (priced as output)
    cost_usd: float = 0.0
    latency_s: float = 0.0
    # attempts that failed transiently and were retried, by cause (a call that finally failed also
    # counts in failed_calls); see RETRY_CAUSES
    retries_rate_limit: int = 0
    retries_server_error: int = 0
    retries_timeout: int = 0
    retries_bad_body: int = 0
    retries_connection: int = 0

    @property
    def retries(self) -> int:
        return sum(getattr(self, f"retries_{cause}") for cause in RETRY_CAUSES)

    def add(self, other: TagTotals) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass
class Accounting:
    """Running totals of one client; `snapshot()` is what run directories record in metrics.json."""

    by_tag: dict[str, TagTotals] = field(default_factory=dict)
    #: outcomes of structured replies parsed outside the learn stages (the judge), per tag: replies,
    #: enforced, parsed, repaired, retried, lost (the stages count theirs in each step's metrics)
    structured_replies: dict[str, dict[str, int]] = field(default_factory=dict)

    def _tag(self, tag: str) -> TagTotals:
        return self.by_tag.setdefault(tag or "untagged", TagTotals())

    def record_call(
        self,
        tag: str,
        *,
        samples: int,
        prompt_tokens: int,
        completion_tokens: int,
        cost_usd: float,
        latency_s: float,
        cached_prompt_tokens: int = 0,
        reasoning_tokens: int = 0,
    ) -> None:
        totals = self._tag(tag)
        totals.calls += 1
        totals.samples += samples
        totals.prompt_tokens += prompt_tokens
        totals.cached_prompt_tokens += cached_prompt_tokens
        totals.completion_tokens += completion_tokens
        totals.reasoning_tokens += reasoning_tokens
        totals.cost_usd += cost_usd
        totals.latency_s += latency_s

    def record_cached(self, tag: str, samples: int) -> None:
        self._tag(tag).cached_samples += samples

    def record_failure(self, tag: str) -> None:
        self._tag(tag).failed_calls += 1

    def record_retry(self, tag: str, cause: str) -> None:
        """One transient failure that is about to be retried; `cause` is one of RETRY_CAUSES."""
        field_name = f"retries_{cause}"
        totals = self._tag(tag)
        setattr(totals, field_name, getattr(totals, field_name) + 1)

    def record_replies(self, tag: str, increments: dict[str, int]) -> None:
        """Add one parsed reply's outcome (counter name -> increment) under `tag`."""
        counts = self.structured_replies.setdefault(tag or "untagged", {})
        for key, value in increments.items():
            counts[key] = counts.get(key, 0) + value

    @property
    def total(self) -> TagTotals:
        out = TagTotals()
        for totals in self.by_tag.values():
            out.add(totals)
        return out

    @property
    def cost_usd(self) -> float:
        return sum(t.cost_usd for t in self.by_tag.values())

    def snapshot(self) -> dict[str, Any]:
        def as_dict(t: TagTotals) -> dict[str, Any]:
            return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in t.__dict__.items()}

        snapshot: dict[str, Any] = {
            "total": as_dict(self.total),
            "by_tag": {k: as_dict(v) for k, v in sorted(self.by_tag.items())},
        }
        if self.structured_replies:  # absent when nothing was counted: snapshots stay as they were
            snapshot["structured_replies"] = {k: dict(v) for k, v in sorted(self.structured_replies.items())}
        return snapshot


RETRY_LABELS = {
    "rate_limit": "429",
    "server_error": "5xx",
    "timeout": "timeout",
    "bad_body": "bad body",
    "connection": "connection",
}


def retries_line(counts: dict[str, Any]) -> str:
    """'retried calls: 3 (429 ×2, timeout ×1)' from a dict with retries_<cause> keys (missing = 0)."""
    by_cause = {label: int(counts.get(f"retries_{cause}", 0) or 0) for cause, label in RETRY_LABELS.items()}
    total = sum(by_cause.values())
    if not total:
        return "retried calls: 0"
    return f"retried calls: {total} (" + ", ".join(f"{label} ×{n}" for label, n in by_cause.items() if n) + ")"
