"""Is the served library helping? The two arms of `tfgrpo serve` traces, per library version.

A version is the library's content hash (with the file's `version` beside it): an edited lesson is a new
version even when `version` was not bumped. Traces written before content hashes group by `version` alone.

Two analyses per version, because the arm a request was ASSIGNED and what it was GIVEN can differ (a
request of arm B sent with `x-tfgrpo-inject: none`, or whose topk injection selected nothing, got no
library):
- intention to treat: arm A vs arm B as assigned, untreated B exchanges included. What deploying the
  library does to the traffic as it comes.
- treated only: arm A vs the B exchanges that were actually given the library. What the library does when
  it is used. The untreated B exchanges are counted (`untreated`) and left out.
Each: every arm's mean reward over its rewarded exchanges with a bootstrap CI (`bootstrap_ci`), and the
paired comparison (`compare_paired`) over the prompts served in both arms: per prompt, the mean reward of
its A exchanges vs the mean of its B exchanges, so a difference is not an artefact of which users landed
in which arm. An exchange's reward is its latest feedback.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel, Field

from tfgrpo.core.errors import EvalError
from tfgrpo.core.metrics import bootstrap_ci
from tfgrpo.core.secrets import mask_url
from tfgrpo.core.stats import PairedComparison, compare_paired
from tfgrpo.serve.arms import CONTROL, LIBRARY
from tfgrpo.serve.traces import TraceStore, version_label

SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file

ALL_VERSIONS = "all"
Row = dict[str, Any]


class ArmStats(BaseModel):
    exchanges: int
    mean_reward: float | None
    ci95: list[float] | None


class VersionComparison(BaseModel):
    version: str = Field(description='"3 1a2b3c4d5e6f": file version and content hash; "all" over every version.')
    library_version: int | None
    library_hash: str | None
    arms: dict[str, ArmStats] = Field(description="Intention to treat: by the arm assigned.")
    paired: PairedComparison | None = Field(description="Intention to treat, paired; None: no prompt in both arms.")
    treated: ArmStats = Field(description="Treated only: the B exchanges that were given the library.")
    treated_paired: PairedComparison | None = Field(description="A vs treated B, paired.")
    untreated: int = Field(description="B exchanges given no library: in `arms`, not in `treated`.")


def compare_traces(traces: str | Path, *, seed: int = 0) -> list[VersionComparison]:
    store = _open_store(traces)
    try:
        rows = store.exchanges(with_feedback=True)  # oldest first
    finally:
        store.close()
    by_version: dict[tuple[int | None, str | None], list[Row]] = defaultdict(list)
    for row in rows:
        by_version[(row["library_version"], row["library_hash"])].append(row)
    results = [_compare(key, version_rows, seed) for key, version_rows in by_version.items()]  # first served first
    if len(by_version) > 1:
        results.append(_compare(None, rows, seed))
    return results


def _open_store(traces: str | Path) -> TraceStore:
    """The trace store `tfgrpo serve` wrote: a missing file, a file that is not SQLite or a database that cannot
    be opened is one line, and reading never creates a store."""
    if "://" not in str(traces):
        path = Path(traces)
        if not path.is_file():
            raise EvalError(f"trace store not found: {path} (the --traces file `tfgrpo serve` wrote)")
        with path.open("rb") as handle:
            header = handle.read(len(SQLITE_HEADER))
        if header and header != SQLITE_HEADER:
            raise EvalError(f"{path} is not a SQLite database (give the --traces file `tfgrpo serve` wrote)")
    try:
        return TraceStore(traces)
    except sa.exc.SQLAlchemyError as exc:
        detail = str(getattr(exc, "orig", None) or exc).splitlines()[0]
        raise EvalError(f"cannot open the trace store {mask_url(str(traces))}: {detail}") from None


def _compare(key: tuple[int | None, str | None] | None, rows: list[Row], seed: int) -> VersionComparison:
    control = [row for row in rows if row["arm"] == CONTROL]
    assigned = [row for row in rows if row["arm"] == LIBRARY]
    treated = [row for row in assigned if row["treated"]]
    return VersionComparison(
        version=ALL_VERSIONS if key is None else version_label(*key),
        library_version=None if key is None else key[0],
        library_hash=None if key is None else key[1],
        arms={CONTROL: _stats(control, seed), LIBRARY: _stats(assigned, seed)},
        paired=_paired(control, assigned, seed),
        treated=_stats(treated, seed),
        treated_paired=_paired(control, treated, seed),
        untreated=len(assigned) - len(treated),
    )


def _stats(rows: list[Row], seed: int) -> ArmStats:
    rewards = [row["reward"] for row in rows]
    return ArmStats(
        exchanges=len(rewards),
        mean_reward=sum(rewards) / len(rewards) if rewards else None,
        ci95=bootstrap_ci(rewards, seed=seed) if rewards else None,
    )


def _paired(a_rows: list[Row], b_rows: list[Row], seed: int) -> PairedComparison | None:
    a, b = _per_prompt(a_rows), _per_prompt(b_rows)
    both = [key for key in a if key in b]
    return compare_paired([a[key] for key in both], [b[key] for key in both], seed=seed) if both else None


def _per_prompt(rows: list[Row]) -> dict[str, float]:
    rewards: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        rewards[row["prompt_key"]].append(row["reward"])
    return {key: sum(values) / len(values) for key, values in rewards.items()}


def comparison_rows(
    results: list[VersionComparison], *, treated_only: bool = False
) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of one of the two tables `tfgrpo compare --traces` prints."""
    headers = ["version", "A n", "A mean [95% CI]", "B n", "B mean [95% CI]", "paired prompts"]
    headers += ["B − A (paired) [95% CI]", "p"]
    pick: Callable[[VersionComparison], tuple[ArmStats, PairedComparison | None]] = (
        (lambda r: (r.treated, r.treated_paired)) if treated_only else (lambda r: (r.arms[LIBRARY], r.paired))
    )
    table = []
    for result in results:
        b_stats, paired = pick(result)
        cells = [result.version]
        for stats in (result.arms[CONTROL], b_stats):
            cells += [str(stats.exchanges), _mean(stats)]
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


def untreated_notes(results: list[VersionComparison]) -> list[str]:
    """One line per version with untreated B exchanges: how many, and where they were counted."""
    return [
        f"version {r.version}: {r.untreated} of {r.arms[LIBRARY].exchanges} B exchanges got no library "
        "(x-tfgrpo-inject: none, or a topk injection that selected nothing): counted in intention to treat, "
        "left out of treated only"
        for r in results
        if r.untreated
    ]


def _mean(stats: ArmStats) -> str:
    if stats.mean_reward is None or stats.ci95 is None:
        return "–"
    return f"{stats.mean_reward:.3f} [{stats.ci95[0]:.3f}, {stats.ci95[1]:.3f}]"
