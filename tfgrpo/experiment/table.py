"""The experiment's final report: one paper-style table over every system and eval set.

Rows are systems (base, the library of each seed, the seeds pooled, each fine-tuned baseline); for each
eval set the columns are Mean@K with its 95% CI and the paired difference against the base with its
p-value, then training tokens, training cost, eval cost and wall time. The statistics come from
`tfgrpo.eval.compare` (one `Comparison` per eval set, also written as that set's full compare report under
`report/SET/`). A fine-tuned baseline that failed keeps its row, marked with the reason; the statistics are
those of the systems that ran. Each learn run's library is also exported as the system prompt to ship
(`report/system_prompt-seed-S.txt`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfgrpo.core.atomic import atomic_write_text
from tfgrpo.eval.compare import Comparison, EvalRun, build_comparison, load_eval_run
from tfgrpo.eval.report import Table, write_report
from tfgrpo.experiences import Library, export_library
from tfgrpo.experiment.exposure import exposure_table
from tfgrpo.experiment.gepa_run import PROMPT_FILE
from tfgrpo.experiment.plan import Step
from tfgrpo.experiment.recipe import Recipe
from tfgrpo.experiment.render import write_table_report
from tfgrpo.experiment.steps import training_numbers

POOLED = "library-pooled"


@dataclass
class SystemRow:
    system: str
    label: str
    training_cost: float | None = None
    training_wall: float | None = None
    training_tokens: int | None = None
    eval_cost: float = 0.0
    eval_wall: float = 0.0
    failed: dict[str, str] | None = None  # eval set -> why this system has no result there
    position: dict[str, int] | None = None  # eval set -> index among that set's compared systems


def pooled_run(runs: list[EvalRun], label: str) -> EvalRun:
    """All seeds' samples of each problem as one system: per problem, n and correct summed over the seeds."""
    by_id: dict[str, dict[str, Any]] = {}
    for run in runs:
        for item in run.per_problem:
            pooled = by_id.setdefault(
                str(item["id"]), {"id": item["id"], "n": 0, "correct": 0, "maj_votes": 0, "failed": 0}
            )
            pooled["n"] += item["n"]
            pooled["correct"] += item["correct"]
            pooled["maj_votes"] += bool(item.get("maj_correct"))
            pooled["failed"] += int(item.get("failed", 0))
    for item in by_id.values():
        item["maj_correct"] = item.pop("maj_votes") * 2 > len(runs)  # maj@k right in most seeds
    metrics = {
        "label": label,
        "cost_usd": sum(float(run.metrics.get("cost_usd") or 0.0) for run in runs),
        "wall_time_s": sum(float(run.metrics.get("wall_time_s") or 0.0) for run in runs),
        "tokens": {
            key: sum(int((run.metrics.get("tokens") or {}).get(key) or 0) for run in runs)
            for key in ("prompt", "completion")
        },
        "provenance": {
            "method": f"Training-Free GRPO, {len(runs)} seeds pooled",
            "model": runs[0].provenance.get("model"),
        },
    }
    return EvalRun(
        name=label, path=str(Path(runs[0].path).parent / POOLED), metrics=metrics, per_problem=list(by_id.values())
    )


def _system_rows(recipe: Recipe, plan: list[Step]) -> list[SystemRow]:
    by_id = {step.id: step for step in plan}
    rows: list[SystemRow] = []
    first_set = next(iter(recipe.evals))
    for step in plan:
        if step.kind != "eval" or step.eval_set != first_set:
            continue
        row = SystemRow(step.system or "", str(step.config.label))
        for dep in step.deps:
            row.training_cost, row.training_wall, row.training_tokens = training_numbers(by_id[dep])
        rows.append(row)
        seeds = [r for r in rows if r.system.startswith("library-seed-")]
        if (
            recipe.report.pooled
            and len(seeds) > 1
            and len(seeds) == len(recipe.learn.seeds)
            and step.system == seeds[-1].system
        ):
            rows.append(
                SystemRow(
                    POOLED,
                    f"library pooled ({len(seeds)} seeds)",
                    sum(r.training_cost or 0.0 for r in seeds),
                    sum(r.training_wall or 0.0 for r in seeds),
                    sum(r.training_tokens or 0 for r in seeds),
                )
            )
    return rows


def build_comparisons(
    recipe: Recipe, plan: list[Step], rows: list[SystemRow], out: Path, failures: dict[str, str] | None = None
) -> dict[str, Comparison]:
    """One comparison per eval set (systems in row order, failed ones left out), each written as a full
    compare report. `failures`: step id -> why, for the steps that failed."""
    failures = failures or {}
    comparisons = {}
    for set_name in recipe.evals:
        steps = {step.system: step for step in plan if step.kind == "eval" and step.eval_set == set_name}
        runs: list[EvalRun] = []
        for row in rows:
            row.position = {**(row.position or {}), set_name: len(runs)}
            if row.system == POOLED:
                seeds = [run for run in runs if Path(run.path).name.startswith("library-seed-")]
                runs.append(pooled_run(seeds, row.label))
                continue
            step = steps[row.system]
            reason = failures.get(step.id)
            if reason is not None:
                # the fine-tune's own error says more than "its eval was not run"
                reason = next((failures[dep] for dep in step.deps if dep in failures), reason)
                row.failed = {**(row.failed or {}), set_name: reason}
                continue
            run = load_eval_run(step.out, name=row.label, seed=recipe.report.seed)
            row.eval_cost += float(run.metrics.get("cost_usd") or 0.0)
            row.eval_wall += float(run.metrics.get("wall_time_s") or 0.0)
            runs.append(run)
        learn_run = next((step.out for step in plan if step.kind == "learn"), None)
        comparison = build_comparison(runs, seed=recipe.report.seed, learn_run=learn_run)
        write_report(comparison, out / set_name)
        comparisons[set_name] = comparison
    for row in rows:
        if row.system == POOLED:
            seeds = [r for r in rows if r.system.startswith("library-seed-")]
            row.eval_cost, row.eval_wall = sum(r.eval_cost for r in seeds), sum(r.eval_wall for r in seeds)
    return comparisons


def _usd(value: float | None) -> str:
    return "–" if value is None else "$0" if value == 0 else f"${value:.4f}" if value < 1 else f"${value:.2f}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    return (
        f"{seconds:.0f} s"
        if seconds < 90
        else f"{seconds / 60:.1f} min"
        if seconds < 5400
        else f"{seconds / 3600:.1f} h"
    )


def _tokens(value: int | None) -> str:
    if value is None:
        return "–"
    return f"{value / 1e6:.1f}M" if value >= 1e6 else f"{value / 1e3:.1f}k" if value >= 1e3 else str(value)


def paper_table(recipe: Recipe, rows: list[SystemRow], comparisons: dict[str, Comparison]) -> Table:
    headers = ["System"]
    for set_name, comparison in comparisons.items():
        k = recipe.evals[set_name].samples
        headers += [f"{set_name} Mean@{k} [95% CI]", f"{set_name} Δ vs {comparison.baseline} (p)"]
    headers += ["Training tokens", "Training cost", "Eval cost", "Wall time"]
    table_rows = []
    for row in rows:
        cells = [row.label]
        for set_name, comparison in comparisons.items():
            failed = (row.failed or {}).get(set_name)
            if failed is not None:
                cells += [f"failed: {failed}", "–"]
                continue
            index = (row.position or {})[set_name]
            system = comparison.systems[index]
            cells.append(f"{100 * system.mean_at_k:.1f} [{100 * system.ci95[0]:.1f}, {100 * system.ci95[1]:.1f}]")
            if index == 0:
                cells.append("–")
            else:
                paired = comparison.paired[index - 1].result
                cells.append(f"{100 * paired.diff:+.1f} (p={paired.p_value:.3g})")
        evaluated = len(row.failed or {}) < len(comparisons)  # on at least one set
        wall = None if row.training_wall is None and not evaluated else (row.training_wall or 0.0) + row.eval_wall
        eval_cost = _usd(row.eval_cost) if evaluated else "–"
        cells += [_tokens(row.training_tokens), _usd(row.training_cost), eval_cost, _duration(wall)]
        table_rows.append(cells)
    note = (
        "Mean@K in %, 95% CI: percentile bootstrap over problems. Δ: paired difference in percentage points "
        "against the first row, p: two-sided paired sign-flip permutation test. Pooled: every seed's samples of a "
        "problem together. Training tokens: the learn run's prompt + completion tokens; GEPA's over its metric calls, "
        "reflections and validations; a fine-tune's tokens through the model in training (prompts included; RL: "
        "the generated batches). Training cost: API spend (local models: $0). Wall time: training (learn, GEPA or "
        "fine-tune) plus evals."
    )
    if any(row.failed for row in rows):
        note += (
            " A failed row has no result: the reason is in its cell, and every statistic is over the rows that ran."
        )
    return Table(key="paper", title=f"{recipe.name}: Mean@K by system", headers=headers, rows=table_rows, note=note)


def export_prompts(plan: list[Step], out: Path) -> list[Path]:
    """Each learn run's library as the system prompt to ship (what `tfgrpo export --format system-prompt` writes),
    and GEPA's prompt beside them (the very file its eval was given)."""
    written = []
    for step in plan:
        library = step.out / "library.json"
        if step.kind == "learn" and library.is_file():
            path = out / f"system_prompt-seed-{step.seed}.txt"
            written.append(export_library(Library.load(library), path, "system-prompt"))
        prompt = step.out / PROMPT_FILE
        if step.kind == "gepa" and prompt.is_file():
            path = out / "system_prompt-gepa.txt"
            atomic_write_text(path, prompt.read_text(encoding="utf-8"))
            written.append(path)
    return written


def write_experiment_report(
    recipe: Recipe, plan: list[Step], out: Path, *, failures: dict[str, str] | None = None
) -> dict[str, Path]:
    """The per-set compare reports, then the paper table as report.md / report.html / accuracy.png / table.json,
    and the exported system prompts. `failures`: step id -> why, for the baselines' steps that failed."""
    rows = _system_rows(recipe, plan)
    comparisons = build_comparisons(recipe, plan, rows, out, failures)
    table = paper_table(recipe, rows, comparisons)
    prompts = export_prompts(plan, out)
    files = write_table_report(
        table,
        comparisons,
        out,
        title=table.title,
        description=recipe.description,
        prompts=prompts,
        extra=[exposure_table(recipe, plan)],
    )
    files["json"] = out / "table.json"
    atomic_write_text(files["json"], json.dumps(table.model_dump(), indent=2, ensure_ascii=False))
    return files
