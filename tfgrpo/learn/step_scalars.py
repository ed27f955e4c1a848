"""What `tfgrpo learn` sends to the experiment trackers (`tfgrpo.core.tracking`) after each step.

One dict of scalars per completed step, read from the step's final metrics (the row `metrics.json` gets, see
`tfgrpo.learn.metrics`) and the library the step ended with:

  train/       accuracy (the share of scored rollouts rewarded correct: the mean of a 0/1 reward),
               rollouts, rollouts_failed
  groups/      kept, skipped (all reasons) and skipped_{homogeneous,too_few_valid,no_majority,no_summaries}
  ops/         proposed, final, applied, rejected, evicted
  library/     size, version
  credit/      contrasts, retired, and the library's experiences by verdict (helps, hurts, unclear, untested)
               with their mean measured effect
  validation/  mean_at_k of the step's candidate library and gate_kept (1 kept, 0 rejected), where measured;
               epoch_mean_at_k at each epoch's end (`epoch_scalars`)
  tokens/      prompt, cached_prompt, completion;  cost/usd;  time/wall_s and time/<stage>_s
"""

from __future__ import annotations

from typing import Any

from tfgrpo.experiences.model import Library
from tfgrpo.learn.config import LearnConfig

SKIP_REASONS = ("homogeneous", "too_few_valid", "no_majority", "no_summaries")
OPS = ("proposed", "final", "applied", "rejected", "evicted")
VERDICTS = ("helps", "hurts", "unclear", "untested")


def step_scalars(step: dict[str, Any], library: Library, config: LearnConfig) -> dict[str, float | None]:
    """The tracked scalars of one completed step (`step`: its row of `metrics.json`)."""
    gate = step.get("gate") or {}
    return {
        "train/accuracy": step.get("accuracy"),
        "train/rollouts": step["rollouts"],
        "train/rollouts_failed": step["rollouts_failed"],
        "groups/kept": step["groups_kept"],
        "groups/skipped": sum(step[f"groups_skipped_{reason}"] for reason in SKIP_REASONS),
        **{f"groups/skipped_{reason}": step[f"groups_skipped_{reason}"] for reason in SKIP_REASONS},
        **{f"ops/{name}": step[f"ops_{name}"] for name in OPS},
        "library/size": step["library_size"],
        "library/version": step["library_version"],
        **credit_scalars(step, library, config),
        "validation/mean_at_k": step.get("val_mean_at_k"),
        "validation/gate_kept": None if not gate else float(gate.get("decision") == "kept"),
        "tokens/prompt": step["prompt_tokens"],
        "tokens/cached_prompt": step["cached_prompt_tokens"],
        "tokens/completion": step["completion_tokens"],
        "cost/usd": step["cost_usd"],
        "time/wall_s": step["wall_time_s"],
        **{f"time/{stage}_s": seconds for stage, seconds in (step.get("stage_seconds") or {}).items()},
    }


def credit_scalars(step: dict[str, Any], library: Library, config: LearnConfig) -> dict[str, float | None]:
    """The step's credit counts and the library's experiences by verdict, with their mean measured effect."""
    summaries = [e.credit.summary(min_groups=config.credit_min_groups, level=config.credit_level) for e in library]
    effects = [s["effect"] for s in summaries if isinstance(s["effect"], float | int)]
    return {
        "credit/contrasts": step.get("credit_contrasts", 0),
        "credit/retired": len(step.get("retired") or []),
        **{f"credit/{verdict}": sum(s["verdict"] == verdict for s in summaries) for verdict in VERDICTS},
        "credit/mean_effect": sum(effects) / len(effects) if effects else None,
    }


def epoch_scalars(validation: dict[str, Any]) -> dict[str, float | None]:
    """An epoch's validation, logged at the epoch's last step."""
    return {"validation/epoch_mean_at_k": validation.get("mean_at_k")}


__all__ = ["epoch_scalars", "step_scalars"]
