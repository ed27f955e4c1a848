"""`tfgrpo finetune --report-to`: the trackers TRL logs to, checked as learn's and eval's are.

TRL's trainers log through transformers' callbacks (`report_to`: tensorboard, mlflow, wandb, trackio, ...);
tfgrpo passes the choice on after the same check `tfgrpo.core.tracking` gives learn and eval: only those four
names, and each one's extra installed, refused in one line before TRL is imported. The run's name defaults to
the output folder's. Where each writes is transformers' choice: TensorBoard event files in `<out>/runs/`,
MLflow where `MLFLOW_TRACKING_URI` points, W&B and trackio as their own settings say.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tfgrpo.core.tracking import parse_report_to, require_trackers


def reporting_options(options: dict[str, Any], out: Path) -> dict[str, Any]:
    """`report_to` as TRL takes it ("none" or the trackers' names) and `run_name` (default: `out`'s name)."""
    trackers = parse_report_to(options.get("report_to"))
    require_trackers(trackers)
    return {"report_to": trackers or "none", "run_name": options.get("run_name") or out.name}


__all__ = ["reporting_options"]
