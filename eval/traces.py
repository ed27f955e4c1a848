"""Is the served library helping? The two arms of `tfgrpo serve` traces, per library version.

Per version (and over all versions): each arm's mean reward over its rewarded exchanges with a
bootstrap CI (`tfgrpo.core.metrics.bootstrap_ci`), and the paired comparison (`tfgrpo.core.stats.compare_paired`)
over the prompts that were served in BOTH arms: per prompt, the mean reward of its A exchanges vs the
mean of its B exchanges, so a difference is not an artefact of which users landed in which arm.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from tfgrpo.core.metrics import bootstrap_ci
from tfgrpo.core.stats import PairedComparison, compare_paired
from tfgrpo.serve.arms import CONTROL, LIBRARY
from tfgrpo.serve.traces import TraceStore

ALL_VERSIONS = "all"


class ArmStats(BaseModel):
    exchanges: int
    mean_reward: float | None
    ci95: list[float] | None


class VersionComparison(BaseModel):
    version: str
    arms: dict[str, ArmStats]
    paired: PairedComparison | None  # None: no prompt seen in both arms


def compare_traces(traces: str | Path, *, seed: int = 0) -> list[VersionComparison]:
    store = TraceStore(traces)
    try:
        rows = store.exchanges(with_feedback=True)
    finally:
        store.close()
    by_version: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_version[str(row["library_version"])].append(row)
    versions = sorted(by_version, key=lambda v: int(v) if v.isdigit() else -1)
    results = [_compare(version, by_version[version], seed) for version in versions]
    if len(versions) > 1:
        results.append(_compare(ALL_VERSIONS, rows, seed))
    return results


def _compare(version: str, rows: list[dict[str, Any]], seed: int) -> VersionComparison:
    arms: dict[str, ArmStats] = {}
    per_prompt: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for arm in (CONTROL, LIBRARY):
        rewards = [row["reward"] for row in rows if row["arm"] == arm]
        for row in rows:
            if row["arm"] == arm:
                per_prompt[row["prompt_key"]][arm].append(row["reward"])
        arms[arm] = ArmStats(
            exchanges=len(rewards),
            mean_reward=sum(rewards) / len(rewards) if rewards else None,
            ci95=bootstrap_ci(rewards, seed=seed) if rewards else None,
        )
    both = [arms_of for arms_of in per_prompt.values() if arms_of[CONTROL] and arms_of[LIBRARY]]
    paired = None
    if both:
        a = [sum(p[CONTROL]) / len(p[CONTROL]) for p in both]
        b = [sum(p[LIBRARY]) / len(p[LIBRARY]) for p in both]
        paired = compare_paired(a, b, seed=seed)
    return VersionComparison(version=version, arms=arms, paired=paired)


def comparison_rows(results: list[VersionComparison]) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the table `tfgrpo compare --traces` prints."""
    headers = [
        "version",
        "A n",
        "A mean [95% CI]",
        "B n",
        "B mean [95% CI]",
        "paired prompts",
        "B − A (paired) [95% CI]",
        "p",
    ]
    table = []
    for result in results:
        cells = [result.version]
        for arm in (CONTROL, LIBRARY):
            stats = result.arms[arm]
            cells += [
                str(stats.exchanges),
                "–"
                if stats.mean_reward is None
                else f"{stats.mean_reward:.3f} [{stats.ci95[0]:.3f}, {stats.ci95[1]:.3f}]",
            ]
        paired = result.paired
        if paired is None:
            cells += ["0", "–", "–"]
        else:
            cells += [
                str(paired.num_problems),
                f"{paired.diff:+.3f} [{paired.ci95[0]:+.3f}, {paired.ci95[1]:+.3f}]",
                f"{paired.p_value:.3g}",
            ]
        table.append(cells)
    return headers, table
