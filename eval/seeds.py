"""Seed sets: several runs of one system that differ only in the seed, and the gain measured across them.

A seed set is a directory with `seeds.json` (`{"kind": "learn" | "eval", "seeds": [...], "runs": {seed: subdir}}`),
written by `tfgrpo learn --seeds N` and by `tfgrpo eval --library SET` (one eval per learned library).
`tfgrpo compare` expands a seed set into its member runs and adds an "Across seeds" table: each seed's
Mean@K, their mean and standard deviation, and the gain over the baseline with a two-way bootstrap CI that
resamples seeds and problems independently (the two sources of variance: a lucky seed and a lucky problem
set both widen it).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tfgrpo.core.errors import RunDirError
from tfgrpo.core.metrics import N_BOOTSTRAP

SEED_SET_FILE = "seeds.json"


def is_seed_set(path: str | Path) -> bool:
    return (Path(path) / SEED_SET_FILE).is_file()


def write_seed_set(root: str | Path, kind: str, seeds: Sequence[int]) -> Path:
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    manifest = {"kind": kind, "seeds": list(seeds), "runs": {str(s): f"seed-{s}" for s in seeds}}
    path = root / SEED_SET_FILE
    path.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return path


def read_seed_set(root: str | Path) -> dict[int, Path]:
    """seed -> member directory, in manifest order."""
    root = Path(root)
    try:
        manifest = json.loads((root / SEED_SET_FILE).read_text(encoding="utf-8"))
        runs = {int(seed): root / sub for seed, sub in manifest["runs"].items()}
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise RunDirError(f"{root / SEED_SET_FILE}: not a seed-set manifest ({exc})") from None
    missing = [str(path) for path in runs.values() if not path.is_dir()]
    if missing:
        raise RunDirError(f"{root}: seed runs missing: {', '.join(missing)}")
    return runs


def expand_run_dirs(run_dirs: Sequence[str | Path]) -> tuple[list[tuple[Path, str | None]], dict[str, list[str]]]:
    """Run directories with seed sets replaced by their members: [(dir, name or None)], {set name: member names}."""
    flat: list[tuple[Path, str | None]] = []
    groups: dict[str, list[str]] = {}
    for run_dir in run_dirs:
        path = Path(run_dir)
        if not is_seed_set(path):
            flat.append((path, None))
            continue
        name = path.name
        members = [(member, f"{name}/seed-{seed}") for seed, member in read_seed_set(path).items()]
        flat.extend(members)
        groups[name] = [member_name for _, member_name in members]
    return flat, groups


def two_way_bootstrap_ci(
    gains: np.ndarray, *, seed: int = 0, n_bootstrap: int = N_BOOTSTRAP, level: float = 0.95
) -> list[float]:
    """Percentile CI of the mean of a seeds x problems matrix, resampling seeds and problems independently."""
    rng = np.random.default_rng(seed)
    n_seeds, n_problems = gains.shape
    means = np.empty(n_bootstrap)
    for b in range(n_bootstrap):
        rows = rng.integers(n_seeds, size=n_seeds)
        cols = rng.integers(n_problems, size=n_problems)
        means[b] = gains[np.ix_(rows, cols)].mean()
    tail = (1 - level) / 2 * 100
    return [float(np.percentile(means, tail)), float(np.percentile(means, 100 - tail))]


def seed_set_rows(
    per_problem: dict[str, list[float]],
    names: list[str],
    groups: dict[str, list[str]],
    *,
    baseline: str,
    seed: int = 0,
    n_bootstrap: int = N_BOOTSTRAP,
) -> list[dict[str, Any]]:
    """One row per seed set: per-seed Mean@K, mean, sd, min/max, gain over the baseline with its two-way CI."""
    matrix = np.array(list(per_problem.values()), dtype=np.float64).T  # systems x problems
    column = {name: index for index, name in enumerate(names)}
    base_members = groups.get(baseline, [baseline])
    base = matrix[[column[m] for m in base_members]].mean(axis=0)
    rows = []
    for set_name, members in groups.items():
        scores = matrix[[column[m] for m in members]]
        seed_means = scores.mean(axis=1)
        gains = scores - base
        is_baseline = set_name == baseline
        rows.append(
            {
                "system": set_name,
                "seeds": len(members),
                "per_seed": [float(v) for v in seed_means],
                "mean": float(seed_means.mean()),
                "sd": float(seed_means.std(ddof=1)) if len(members) > 1 else 0.0,
                "min": float(seed_means.min()),
                "max": float(seed_means.max()),
                "gain": None if is_baseline else float(gains.mean()),
                "gain_ci95": None if is_baseline else two_way_bootstrap_ci(gains, seed=seed, n_bootstrap=n_bootstrap),
                "gain_sd_over_seeds": None
                if is_baseline
                else (float(gains.mean(axis=1).std(ddof=1)) if len(members) > 1 else 0.0),
            }
        )
    return rows


__all__ = [
    "SEED_SET_FILE",
    "expand_run_dirs",
    "is_seed_set",
    "read_seed_set",
    "seed_set_rows",
    "two_way_bootstrap_ci",
    "write_seed_set",
]
