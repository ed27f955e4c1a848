"""Compare eval runs on the same problems: side-by-side metrics, paired tests against the first run, plots.

An eval run directory holds `metrics.json` (written by `tfgrpo.core.metrics.summarize` plus the runner's
settings and an optional `provenance` block) and `samples.jsonl`. The first run is the baseline. When
the runs cover different problems, every number is computed on the problems common to all of them, and
the report says so.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tfgrpo.core.datasets import iter_jsonl_objects
from tfgrpo.core.errors import RunDirError
from tfgrpo.core.metrics import N_BOOTSTRAP, aggregate, summarize
from tfgrpo.core.stats import compare_paired
from tfgrpo.eval.comparison import Comparison, EvalRun, PairedRow, SystemSummary
from tfgrpo.eval.matrix import matrix_rows, read_matrix
from tfgrpo.eval.report import write_report
from tfgrpo.eval.seeds import expand_run_dirs, seed_set_rows


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [row for _, row in iter_jsonl_objects(path, error=RunDirError)]


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RunDirError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, dict):
        raise RunDirError(f"{path}: expected a JSON object at the top level")
    return data


def load_eval_run(run_dir: str | Path, *, name: str | None = None, seed: int = 0) -> EvalRun:
    """Read metrics.json (and samples.jsonl when metrics.json lacks per-problem results)."""
    path = Path(run_dir)
    if not path.is_dir():
        raise RunDirError(f"eval run directory not found: {path}")
    metrics_path, samples_path = path / "metrics.json", path / "samples.jsonl"
    metrics = read_json(metrics_path) if metrics_path.is_file() else {}
    per_problem = metrics.get("per_problem")
    if not per_problem:
        if not samples_path.is_file():
            raise RunDirError(f"{path}: not an eval run (needs metrics.json with per_problem, or samples.jsonl)")
        rows = read_jsonl(samples_path)
        for line_number, row in enumerate(rows, start=1):
            if "problem_id" not in row:
                raise RunDirError(f"{samples_path}: row {line_number} has no 'problem_id'")
        try:
            summary = summarize(rows, seed=seed)
        except ValueError as exc:
            raise RunDirError(f"{samples_path}: {exc}") from None
        metrics = {**summary, **metrics}
        per_problem = summary["per_problem"]
    for index, item in enumerate(per_problem):
        if not isinstance(item, dict) or not {"id", "n", "correct"} <= item.keys():
            raise RunDirError(f"{metrics_path}: per_problem[{index}] needs keys id, n, correct")
    label = name or metrics.get("label") or metrics.get("name") or path.name
    return EvalRun(name=str(label), path=str(path), metrics=metrics, per_problem=per_problem)


def load_learn_run(run_dir: str | Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(steps, other top-level numbers) from a learn run's metrics.json."""
    path = Path(run_dir)
    metrics_path = path / "metrics.json"
    if not metrics_path.is_file():
        raise RunDirError(f"learn run has no metrics.json: {metrics_path}")
    metrics = read_json(metrics_path)
    steps = metrics.get("steps")
    if not isinstance(steps, list) or not steps:
        raise RunDirError(f"{metrics_path}: not a learn run (needs a non-empty 'steps' list)")
    for index, step in enumerate(steps):
        if not isinstance(step, dict) or "accuracy" not in step:
            raise RunDirError(f"{metrics_path}: steps[{index}] needs an 'accuracy' (rollout accuracy)")
    # totals may sit at the top level or under "totals"; keep the scalars for the report's learn table
    source = {**metrics, **metrics["totals"]} if isinstance(metrics.get("totals"), dict) else metrics
    totals = {key: value for key, value in source.items() if key != "steps" and isinstance(value, (int, float, str))}
    return steps, totals


def load_learn_selection(run_dir: str | Path) -> dict[str, Any]:
    """The trust keys of a learn run's metrics.json: pareto view, gate counts, best step, leakage findings."""
    metrics = read_json(Path(run_dir) / "metrics.json")
    return {key: metrics[key] for key in ("pareto", "gate", "best_step", "leakage") if metrics.get(key) is not None}


def load_learn_library(run_dir: str | Path) -> list[dict[str, Any]]:
    """The experiences of a learn run's library.json (none when the run has no library yet)."""
    path = Path(run_dir) / "library.json"
    if not path.is_file():
        return []
    data = read_json(path)
    items = data.get("experiences") if isinstance(data, dict) else None
    return [item for item in items or [] if isinstance(item, dict) and "id" in item and "text" in item]


def _unique_names(runs: Sequence[EvalRun]) -> list[str]:
    names = [run.name for run in runs]
    seen: dict[str, int] = {}
    unique = []
    for run, name in zip(runs, names, strict=False):
        if names.count(name) > 1:  # e.g. two `.../eval` folders: prefix the parent folder
            name = f"{Path(run.path).resolve().parent.name}/{name}"
        seen[name] = seen.get(name, 0) + 1
        unique.append(name if seen[name] == 1 else f"{name} ({seen[name]})")
    return unique


def _common_problems(runs: Sequence[EvalRun]) -> tuple[list[str], str | None]:
    id_sets = [{str(p["id"]) for p in run.per_problem if p["n"] > 0} for run in runs]
    common = set.intersection(*id_sets)
    if not common:
        listing = "; ".join(f"{run.name}: {len(ids)} problems" for run, ids in zip(runs, id_sets, strict=False))
        raise RunDirError(f"the runs share no problem, nothing to compare ({listing})")
    ordered = [str(p["id"]) for p in runs[0].per_problem if str(p["id"]) in common]
    if all(len(ids) == len(common) for ids in id_sets):
        return ordered, None
    sizes = ", ".join(f"{run.name} has {len(ids)}" for run, ids in zip(runs, id_sets, strict=False))
    return (
        ordered,
        f"The runs cover different problems ({sizes}); every number is computed on the {len(common)} problems common to all runs.",
    )


def build_comparison(
    runs: Sequence[EvalRun],
    *,
    seed: int = 0,
    n_bootstrap: int = N_BOOTSTRAP,
    learn_run: str | Path | None = None,
) -> Comparison:
    """Metrics of every run on the common problems and paired tests of each run against the first."""
    if len(runs) < 1:
        raise RunDirError("compare needs at least one eval run")
    names = _unique_names(runs)
    runs = [run.model_copy(update={"name": name}) for run, name in zip(runs, names, strict=False)]
    problem_ids, note = _common_problems(runs)

    systems, accuracy_columns = [], []
    for run in runs:
        by_id = {str(p["id"]): p for p in run.per_problem}
        subset = [by_id[pid] for pid in problem_ids]
        accuracy_columns.append([p["correct"] / p["n"] for p in subset])
        systems.append(_system_summary(run, subset, seed=seed, n_bootstrap=n_bootstrap))

    paired = [
        PairedRow(
            system=system.name,
            baseline=systems[0].name,
            result=compare_paired(accuracy_columns[0], column, seed=seed, n_bootstrap=n_bootstrap),
        )
        for system, column in zip(systems[1:], accuracy_columns[1:], strict=False)
    ]
    learn_steps, learn_totals = load_learn_run(learn_run) if learn_run else ([], {})
    return Comparison(
        baseline=systems[0].name,
        systems=systems,
        problem_ids=problem_ids,
        problems_note=note,
        per_problem={pid: [column[i] for column in accuracy_columns] for i, pid in enumerate(problem_ids)},
        paired=paired,
        seed=seed,
        learn_run=str(learn_run) if learn_run else None,
        learn_steps=learn_steps,
        learn_totals=learn_totals,
        learn_selection=load_learn_selection(learn_run) if learn_run else {},
        learn_experiences=load_learn_library(learn_run) if learn_run else [],
    )


def _system_summary(run: EvalRun, subset: list[dict[str, Any]], *, seed: int, n_bootstrap: int) -> SystemSummary:
    """One run's metrics on the compared problems (`subset`), with its model, eval cost and provenance."""
    summary = aggregate(subset, seed=seed, n_bootstrap=n_bootstrap)
    metrics = run.metrics
    settings = metrics.get("settings") or {}
    return SystemSummary(
        name=run.name,
        path=run.path,
        mean_at_k=summary["mean_at_k"],
        ci95=summary["ci95"],
        k=summary["k"],
        pass_at_k=summary["pass_at_k"],
        maj_at_k=summary["maj_at_k"],
        num_problems=summary["num_problems"],
        num_problems_in_run=sum(1 for p in run.per_problem if p["n"] > 0),
        num_samples=sum(p["n"] for p in subset),
        failed_samples=sum(int(p.get("failed", 0)) for p in subset),
        model=run.provenance.get("model") or metrics.get("model") or (settings.get("llm") or {}).get("model"),
        eval_tokens=dict(metrics.get("tokens") or {}),
        eval_cost_usd=metrics.get("cost_usd"),
        eval_wall_s=metrics.get("wall_s", metrics.get("wall_time_s")),
        eval_retries={
            key: value
            for key, value in ((metrics.get("usage") or {}).get("total") or {}).items()
            if key.startswith("retries_")
        },
        provenance=run.provenance,
    )


def compare_runs(
    run_dirs: Sequence[str | Path],
    out_dir: str | Path,
    *,
    learn_run: str | Path | None = None,
    seed: int = 0,
    n_bootstrap: int = N_BOOTSTRAP,
    matrix: str | Path | None = None,
) -> tuple[Comparison, dict[str, Path]]:
    """Load the runs, compare them, write report.md, report.html, comparison.json and PNGs into out_dir.

    `matrix`: an eval matrix directory (`tfgrpo eval --matrix`); its cells come first, then `run_dirs`."""
    manifest, cells = read_matrix(matrix) if matrix else ({}, [])
    if not run_dirs and not cells:
        raise RunDirError("compare needs at least one eval run directory (or --matrix DIR)")
    flat, groups = expand_run_dirs(run_dirs)
    flat = [*cells, *flat]  # a seed set counts as its member runs, plus an across-seeds table
    runs = [load_eval_run(path, seed=seed, name=name) for path, name in flat]
    comparison = build_comparison(runs, seed=seed, n_bootstrap=n_bootstrap, learn_run=learn_run)
    if manifest:
        names = [system.name for system in comparison.systems]
        ci95 = {system.name: system.ci95 for system in comparison.systems}
        rows = matrix_rows(manifest, comparison.per_problem, names, ci95, seed=seed)
        comparison.matrix = {"models": manifest["models"], "libraries": manifest["libraries"], "rows": rows}
    if groups:
        names = [system.name for system in comparison.systems]
        first = Path(run_dirs[0]).name if Path(run_dirs[0]).name in groups else comparison.baseline
        comparison.seed_sets = seed_set_rows(
            comparison.per_problem, names, groups, baseline=first, seed=seed, n_bootstrap=n_bootstrap
        )
    files = write_report(comparison, Path(out_dir))
    return comparison, files


__all__ = [
    "Comparison",
    "EvalRun",
    "PairedRow",
    "SystemSummary",
    "build_comparison",
    "compare_runs",
    "load_eval_run",
    "load_learn_run",
    "load_learn_selection",
    "read_json",
    "read_jsonl",
]
