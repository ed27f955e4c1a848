"""Selection that cannot overfit silently: per-step validation, the noise gate, and the Pareto view.

- `select_by: step` validates every step's library on the validation set (Mean@k, and each problem's share
  of correct samples) and makes the best step's library `library.json`; ties go to the earlier step.
- `gate: true` keeps a step's library only when validation does not drop beyond its noise: the step is
  rejected when the whole bootstrap CI (over validation problems, paired) of Δ = after − before lies below
  0. A neutral or noisy step is kept. Every decision is recorded in the step's metrics and counted.
- The Pareto view (GEPA-style): every validated candidate library (step 0 and each step's candidate, kept
  or not) with its per-problem scores; a candidate is on the front when no other candidate is at least as
  good on every validation problem and better on one.
"""

from __future__ import annotations

import statistics
from typing import Any

from tfgrpo.core.stats import paired_bootstrap_ci

INITIAL = 0  # the step number of the starting library


def gate_decision(before: dict[str, float], after: dict[str, float], *, seed: int) -> dict[str, Any]:
    """Paired comparison of two validations (problem id -> share correct); rejected when the CI of Δ is all < 0."""
    ids = sorted(before.keys() & after.keys())
    if not ids:
        return {"decision": "kept", "reason": "no validation problem scored on both sides", "problems": 0}
    a, b = [before[i] for i in ids], [after[i] for i in ids]
    low, high = paired_bootstrap_ci(a, b, seed=seed)
    diff = statistics.fmean(b) - statistics.fmean(a)
    rejected = high < 0
    return {
        "decision": "rejected" if rejected else "kept",
        "val_before": statistics.fmean(a),
        "val_after": statistics.fmean(b),
        "diff": diff,
        "ci95": [low, high],
        "problems": len(ids),
        "reason": "validation dropped beyond noise (95% CI of Δ below 0)" if rejected else "no drop beyond noise",
    }


def reference_step(step_validation: dict[int, dict[str, Any]], step: int) -> int | None:
    """The latest step before `step` whose library was kept (its validation is the gate's baseline)."""
    kept = [s for s, v in step_validation.items() if s < step and v.get("gate", "kept") == "kept"]
    return max(kept) if kept else None


def select_best_step(step_validation: dict[int, dict[str, Any]]) -> int | None:
    """Highest Mean@k among kept libraries (step 0 included); ties go to the earlier step."""
    scored = [
        (v["mean_at_k"], -step, step)
        for step, v in step_validation.items()
        if v.get("mean_at_k") is not None and v.get("gate", "kept") == "kept"
    ]
    return max(scored)[2] if scored else None


def pareto_view(candidates: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """One row per candidate: mean, problems where it is (co-)best, on the front, and who dominates it."""
    ids = sorted(set.intersection(*(set(s) for s in candidates.values()))) if candidates else []
    best = {i: max(scores[i] for scores in candidates.values()) for i in ids}
    rows = []
    for name, scores in candidates.items():
        dominators = [
            other
            for other, theirs in candidates.items()
            if other != name and all(theirs[i] >= scores[i] for i in ids) and any(theirs[i] > scores[i] for i in ids)
        ]
        rows.append(
            {
                "candidate": name,
                "mean": statistics.fmean(scores[i] for i in ids) if ids else None,
                "best_on": sum(scores[i] == best[i] for i in ids),
                "problems": len(ids),
                "on_front": not dominators,
                "dominated_by": dominators[:3],
            }
        )
    return rows


def selection_metrics(step_validation: dict[int, dict[str, Any]], *, select_by: str) -> dict[str, Any]:
    """metrics.json keys: best_step, step_validation[], gate counts, pareto[]."""
    if not step_validation:
        return {}
    decisions = [v.get("gate") for s, v in step_validation.items() if s != INITIAL and v.get("gate")]
    candidates = {f"step {s}": v["per_problem"] for s, v in sorted(step_validation.items()) if v.get("per_problem")}
    return {
        "best_step": select_best_step(step_validation) if select_by == "step" else None,
        "step_validation": [
            {"step": s, **{k: v for k, v in result.items() if k != "per_problem"}}
            for s, result in sorted(step_validation.items())
        ],
        "gate": {"kept": decisions.count("kept"), "rejected": decisions.count("rejected")},
        "pareto": pareto_view(candidates),
    }


__all__ = ["gate_decision", "pareto_view", "reference_step", "select_best_step", "selection_metrics"]
