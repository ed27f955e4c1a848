"""Synthetic eval run directories (samples.jsonl + metrics.json) for the compare and report tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tfgrpo.core.metrics import summarize


def synthetic_samples(accuracies, *, k=8, seed=0, prefix="p"):
    """Sample rows for problems whose true accuracy is given; the answer is right iff the reward is 1."""
    rng = np.random.default_rng(seed)
    rows = []
    for index, accuracy in enumerate(accuracies):
        for sample in range(k):
            correct = bool(rng.random() < accuracy)
            rows.append(
                {
                    "problem_id": f"{prefix}{index:02d}",
                    "sample": sample,
                    "reward": 1.0 if correct else 0.0,
                    "extracted": "42" if correct else str(rng.integers(0, 3)),
                    "gold": "42",
                    "prompt_tokens": 30,
                    "completion_tokens": 100,
                    "cost_usd": 0.001,
                    "error": None,
                }
            )
    return rows


def write_eval_run(run_dir: Path, rows, *, provenance=None, label=None, with_metrics=True) -> Path:
    run_dir.mkdir(parents=True)
    (run_dir / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    if with_metrics:
        metrics = summarize(rows, n_bootstrap=1000)
        metrics.update(provenance=provenance or {}, wall_time_s=12.5)
        if label:
            metrics["label"] = label
        (run_dir / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    return run_dir


WEAK = [0.1, 0.2, 0.3, 0.15, 0.25] * 6  # 30 problems
STRONG = [min(1.0, a + 0.5) for a in WEAK]
