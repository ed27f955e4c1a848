"""What a comparison is made of: eval runs as read from disk, each system's summary, the paired rows, and the
`Comparison` a report renders (also written as comparison.json). Data only; `tfgrpo.eval.compare` builds it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tfgrpo.core.stats import PairedComparison


class EvalRun(BaseModel):
    """One eval run as read from its directory."""

    model_config = ConfigDict(frozen=True)

    name: str
    path: str
    metrics: dict[str, Any]
    per_problem: list[dict[str, Any]]

    @property
    def provenance(self) -> dict[str, Any]:
        return dict(self.metrics.get("provenance") or {})


class SystemSummary(BaseModel):
    """One system's metrics on the compared problems, and how it was obtained."""

    name: str
    path: str
    mean_at_k: float
    ci95: list[float]
    k: int
    pass_at_k: dict[str, float]
    maj_at_k: float
    num_problems: int
    num_problems_in_run: int
    num_samples: int
    failed_samples: int
    model: str | None = None
    eval_tokens: dict[str, Any] = Field(default_factory=dict)
    eval_cost_usd: float | None = None
    eval_wall_s: float | None = None
    #: retried calls of the eval run by cause (retries_rate_limit, retries_server_error, ...): a flaky provider shows here
    eval_retries: dict[str, int] = Field(default_factory=dict)
    provenance: dict[str, Any] = Field(default_factory=dict)


class PairedRow(BaseModel):
    system: str
    baseline: str
    result: PairedComparison


class Comparison(BaseModel):
    """Everything a report shows; also written as comparison.json."""

    baseline: str
    systems: list[SystemSummary]
    problem_ids: list[str]
    problems_note: str | None = Field(None, description="Set when the runs covered different problems.")
    per_problem: dict[str, list[float]] = Field(description="problem id → accuracy per system, in system order.")
    paired: list[PairedRow]
    seed: int
    learn_run: str | None = None
    learn_steps: list[dict[str, Any]] = Field(default_factory=list)
    learn_totals: dict[str, Any] = Field(default_factory=dict)
    learn_selection: dict[str, Any] = Field(
        default_factory=dict,
        description="The learn run's pareto, gate counts, best_step and leakage findings (docs/trust.md).",
    )
    seed_sets: list[dict[str, Any]] = Field(
        default_factory=list, description="Across-seed rows of seed-set systems (tfgrpo.eval.seeds)."
    )
    matrix: dict[str, Any] = Field(
        default_factory=dict, description="Model x library table of an eval matrix (tfgrpo.eval.matrix)."
    )
    learn_experiences: list[dict[str, Any]] = Field(
        default_factory=list, description="The learn run's final library: id, text, provenance of each experience."
    )


__all__ = ["Comparison", "EvalRun", "PairedRow", "SystemSummary"]
