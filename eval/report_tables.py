"""The report's tables, built once from a `Comparison` and rendered as markdown, HTML and the CLI's rich table.

One builder per table, in the order the report shows them (`build_tables`); the optional tables (learn
run, learned experiences, candidate libraries, leakage, seeds, transfer matrix) appear only when the
comparison carries their data.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from tfgrpo.eval.comparison import Comparison, SystemSummary
from tfgrpo.llm.accounting import retries_line

ALPHA = 0.05


class Table(BaseModel):
    key: str
    title: str
    headers: list[str]
    rows: list[list[str]]
    note: str | None = None


def build_tables(comparison: Comparison) -> list[Table]:
    """Every table of the report, in reading order; optional ones only when the comparison has their data."""
    tables = [_accuracy_table(comparison)]
    if comparison.paired:
        tables.append(_paired_table(comparison))
    tables += [_cost_table(comparison.systems), _per_problem_table(comparison)]
    if comparison.learn_steps:
        tables.append(_learn_table(comparison))
    if comparison.learn_experiences:
        tables.append(_experiences_table(comparison.learn_experiences))
    if any(system.provenance.get("finetune_method") for system in comparison.systems):
        tables.append(_finetune_table(comparison.systems))
    tables.extend(_selection_tables(comparison.learn_selection))
    if comparison.seed_sets:
        tables.append(_seed_table(comparison.seed_sets))
    if comparison.matrix:
        tables.append(_matrix_table(comparison.matrix))
    return tables


def _accuracy_table(comparison: Comparison) -> Table:
    systems = comparison.systems
    ks = sorted({int(k) for system in systems for k in system.pass_at_k})
    return Table(
        key="accuracy",
        title="Accuracy",
        headers=["System", "Problems", "K", "Mean@K [95% CI]", *[f"pass@{k}" for k in ks], "maj@K"],
        rows=[
            [
                system.name
                + (" (baseline)" if index == 0 else "")
                + (" ⚠ overlaps eval set" if _overlaps(system) else ""),
                str(system.num_problems),
                str(system.k),
                f"{_pct(system.mean_at_k)} [{_pct(system.ci95[0])}, {_pct(system.ci95[1])}]",
                *[_pct(system.pass_at_k.get(str(k))) for k in ks],
                _pct(system.maj_at_k),
            ]
            for index, system in enumerate(systems)
        ],
        note=" ".join(filter(None, [comparison.problems_note, _overlap_note(systems)])) or None,
    )


def _paired_table(comparison: Comparison) -> Table:
    return Table(
        key="paired",
        title=f"Paired difference in Mean@K against {comparison.baseline}",
        headers=["System", "Δ Mean@K", "95% CI of Δ", "p-value", "wins / losses / ties", "verdict"],
        rows=[
            [
                row.system,
                _pp(row.result.diff),
                f"[{_pp(row.result.ci95[0])}, {_pp(row.result.ci95[1])}]",
                f"{row.result.p_value:.3g}",
                f"{row.result.wins} / {row.result.losses} / {row.result.ties}",
                _verdict(row.result.diff, row.result.p_value),
            ]
            for row in comparison.paired
        ],
        note=(
            "Δ = system − baseline, per problem, averaged over the common problems. CI: percentile bootstrap "
            f"over problems; p: two-sided paired sign-flip permutation test ({comparison.paired[0].result.p_method}). "
            f"Wins/losses count problems where the system's share of correct samples is higher/lower. Seed {comparison.seed}."
        ),
    )


def _cost_table(systems: list[SystemSummary]) -> Table:
    return Table(
        key="cost",
        title="How each system was obtained",
        headers=[
            "System",
            "Method",
            "Model",
            "Training cost",
            "Training time",
            "Training samples",
            "Eval tokens (prompt (cached) / completion)",
            "Eval cost",
            "Eval time",
            "Eval retries",
        ],
        rows=[
            [
                system.name,
                _method(system),
                system.model or "–",
                _training_cost(system),
                _training_time(system),
                str(system.provenance.get("train_samples", "–")),
                _eval_tokens(system.eval_tokens),
                _usd(system.eval_cost_usd),
                _duration(system.eval_wall_s),
                retries_line(system.eval_retries).removeprefix("retried calls: ") if system.eval_retries else "–",
            ]
            for system in systems
        ],
        note="Training columns come from each run's metrics.json `provenance` (learn run cost and time, fine-tuning time). "
        "Eval retries: transient failures (429, 5xx, timeout, bad body, connection) absorbed by retries.",
    )


def _per_problem_table(comparison: Comparison) -> Table:
    return Table(
        key="per_problem",
        title="Per-problem accuracy (share of samples correct)",
        headers=["Problem", *[system.name for system in comparison.systems]],
        rows=[[pid, *[_pct(v) for v in values]] for pid, values in comparison.per_problem.items()],
    )


def _learn_table(comparison: Comparison) -> Table:
    last = comparison.learn_steps[-1]
    first = comparison.learn_steps[0]
    totals = comparison.learn_totals
    shown = {key: label for key, label in _LEARN_TOTALS.items() if key in totals}
    return Table(
        key="learn",
        title=f"Learn run {comparison.learn_run}",
        headers=["Steps", "Rollout accuracy (first → last step)", "Library size (last step)", *shown.values()],
        rows=[
            [
                str(len(comparison.learn_steps)),
                f"{_pct(first.get('accuracy'))} → {_pct(last.get('accuracy'))}",
                str(last.get("library_size", "–")),
                *[_learn_value(key, totals[key]) for key in shown],
            ]
        ],
        note="All counters are in the learn run's metrics.json (`totals`, `steps[]`).",
    )


def _experiences_table(experiences: list[dict[str, Any]]) -> Table:
    return Table(
        key="experiences",
        title=f"Learned experiences ({len(experiences)})",
        headers=["Id", "Experience", "Effect on reward [95% CI], n", "Provenance"],
        rows=[
            [e["id"], e["text"], _credit(e.get("credit") or {}), _provenance(e.get("provenance") or {})]
            for e in experiences
        ],
        note="The library the library arm was evaluated with (the learn run's library.json). Effect: mean reward "
        "of the learn run's rollouts with the experience in context minus those of the same queries that left it "
        "out at random (credit), n = queries; – = not measured.",
    )


def _credit(credit: dict[str, Any]) -> str:
    effect, low, high = credit.get("effect"), credit.get("low"), credit.get("high")
    if effect is None:
        return "–"
    interval = f" [{low:+.2f}, {high:+.2f}]" if low is not None and high is not None else ""
    return f"{effect:+.2f}{interval}, n={credit.get('groups', 0)}"


def _finetune_table(systems: list[SystemSummary]) -> Table:
    def count(value: Any) -> str:
        return "–" if value is None else f"{int(value):,}"

    rows = []
    for system in systems:
        provenance = system.provenance
        if not provenance.get("finetune_method"):
            continue
        groups = provenance.get("finetune_groups") or {}
        batches = provenance.get("finetune_rl_batches")
        rows.append(
            [
                system.name,
                f"{provenance['finetune_method']} ({provenance.get('finetune_peft') or 'full'})",
                str(provenance.get("adapter") or "–"),
                count(provenance.get("train_samples")),
                count(provenance.get("finetune_steps")),
                count(provenance.get("finetune_tokens_processed")),
                count(provenance.get("finetune_tokens_in_loss")),
                f"{groups['filtered']} of {groups['total']}" if groups else "–",
                f"{provenance.get('finetune_rl_batches_nothing_to_learn', 0)} of {batches}" if batches else "–",
                _duration(provenance.get("finetune_wall_s")),
            ]
        )
    return Table(
        key="finetune",
        title="Fine-tuned baselines: what the training did",
        headers=[
            "System",
            "Method",
            "Adapter",
            "Training samples",
            "Optimizer steps",
            "Tokens processed",
            "Tokens in the loss",
            "Groups filtered (equal rewards)",
            "Batches with nothing to learn",
            "Time",
        ],
        rows=rows,
        note="From each adapter's finetune_summary.json. Tokens processed: through the model in training (prompt "
        "included; RL: the generated batches). Tokens in the loss: SFT: the completion tokens; RL: the completion "
        "tokens of the groups kept, whose advantage can be non-zero.",
    )


def _matrix_table(matrix: dict[str, Any]) -> Table:
    def cell(entry: dict[str, Any]) -> str:
        text = f"{_pct(entry['mean'])} [{_pct(entry['ci95'][0])}, {_pct(entry['ci95'][1])}]"
        if entry["gain"] is not None:
            text += f"; Δ {_pp(entry['gain'])} [{_pp(entry['gain_ci95'][0])}, {_pp(entry['gain_ci95'][1])}]"
        return text

    return Table(
        key="matrix",
        title="Transfer: model x library (Mean@K [95% CI]; Δ over the model's first column)",
        headers=["Model", *matrix["libraries"]],
        rows=[[row["model"], *[cell(entry) for entry in row["cells"]]] for row in matrix["rows"]],
        note=(
            "Each cell is one eval run. Δ: paired difference over the same problems against the same model with the first "
            "library column (usually no library), percentile bootstrap CI over problems."
        ),
    )


def _seed_table(rows: list[dict[str, Any]]) -> Table:
    return Table(
        key="seeds",
        title="Across seeds",
        headers=[
            "System",
            "Seeds",
            "Mean@K per seed",
            "Mean ± sd over seeds",
            "Min – max",
            "Gain over baseline [95% CI, seeds × problems]",
        ],
        rows=[
            [
                row["system"],
                str(row["seeds"]),
                " ".join(_pct(v) for v in row["per_seed"]),
                f"{_pct(row['mean'])} ± {100 * row['sd']:.1f} pp",
                f"{_pct(row['min'])} – {_pct(row['max'])}",
                "baseline"
                if row["gain"] is None
                else f"{_pp(row['gain'])} [{_pp(row['gain_ci95'][0])}, {_pp(row['gain_ci95'][1])}]",
            ]
            for row in rows
        ],
        note=(
            "A seed set is one system learned (or evaluated) with several seeds. Its gain CI is a two-way bootstrap "
            "that resamples seeds and problems independently, so both a lucky seed and a lucky problem set widen it."
        ),
    )


def _selection_tables(selection: dict[str, Any]) -> list[Table]:
    """The learn run's candidate libraries (Pareto view) and its leakage findings, when it recorded them."""
    tables = []
    if selection.get("pareto"):
        gate = selection.get("gate") or {}
        tables.append(
            Table(
                key="pareto",
                title="Candidate libraries on validation (Pareto view)",
                headers=["Candidate", "Validation Mean@k", "Best on (problems)", "On the front", "Dominated by"],
                rows=[
                    [
                        row["candidate"]
                        + (" (selected)" if row["candidate"] == f"step {selection.get('best_step')}" else ""),
                        _pct(row["mean"]),
                        f"{row['best_on']} / {row['problems']}",
                        "yes" if row["on_front"] else "no",
                        ", ".join(row["dominated_by"]) or "–",
                    ]
                    for row in selection["pareto"]
                ],
                note=(
                    f"Every validated candidate library of the learn run, per validation problem. Gate: {gate.get('kept', 0)} "
                    f"step(s) kept, {gate.get('rejected', 0)} rejected (validation dropped beyond the bootstrap CI)."
                ),
            )
        )
    if selection.get("leakage"):
        tables.append(
            Table(
                key="leakage",
                title="Leakage guard findings of the learn run",
                headers=["Step", "Action", "Kind", "Problem", "Evidence", "Experience"],
                rows=[
                    [
                        str(r["step"]),
                        r["action"],
                        r["kind"],
                        f"{r['source']}:{r['problem_id']}",
                        r["evidence"],
                        r["text"],
                    ]
                    for r in selection["leakage"]
                ],
            )
        )
    return tables


def _provenance(provenance: dict[str, Any]) -> str:
    parts = [f"{provenance['operation']}" if provenance.get("operation") else ""]
    if provenance.get("step") is not None:
        parts.append(f"step {provenance['step']}")
    if provenance.get("query_ids"):
        parts.append("from " + ", ".join(provenance["query_ids"]))
    return ", ".join(p for p in parts if p) or "–"


# The learn totals a reader needs to judge a run; metrics.json has the rest.
_LEARN_TOTALS = {
    "rollouts": "Rollouts",
    "rollouts_failed": "Failed calls",
    "groups_kept": "Groups kept",
    "groups_total": "Groups",
    "ops_proposed": "Ops proposed",
    "ops_applied": "Ops applied",
    "parse_failures": "Unparsable replies",
    "stage_replies_lost": "Stage replies lost",
    "leaks_rejected": "Leaks rejected",
    "leaks_flagged": "Leaks flagged",
    "prompt_tokens": "Tokens in",
    "cached_prompt_tokens": "Tokens in, cached",
    "uncached_prompt_tokens": "Tokens in, uncached",
    "completion_tokens": "Tokens out",
    "cost_usd": "Cost",
    "wall_time_s": "Wall time",
}


def _overlaps(system: SystemSummary) -> bool:
    return bool((system.provenance.get("leakage") or {}).get("overlaps"))


def _overlap_note(systems: list[SystemSummary]) -> str | None:
    marked = [s.name for s in systems if _overlaps(s)]
    if not marked:
        return None
    return (
        f"⚠ {', '.join(marked)}: the library's content or provenance overlaps the eval set (leaked answers, copied "
        "problems or learned on it; see its metrics.json provenance.leakage), so its score is not a held-out score."
    )


def _learn_value(key: str, value: Any) -> str:
    if key == "cost_usd":
        return _usd(value)
    if key == "wall_time_s":
        return _duration(value)
    return str(value)


def _verdict(diff: float, p_value: float) -> str:
    if p_value >= ALPHA:
        return "no significant difference"
    return "better" if diff > 0 else "worse"


# -- cell formatting ---------------------------------------------------------------------------------
def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def _pp(value: float) -> str:
    return f"{100 * value:+.1f} pp"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    seconds = float(seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _usd(value: float | None) -> str:
    if value is None:
        return "–"
    value = float(value)
    return "$0" if value == 0 else f"${value:.4f}" if value < 1 else f"${value:.2f}"


def _method(system: SystemSummary) -> str:
    provenance = system.provenance
    if provenance.get("method"):
        return str(provenance["method"])
    if provenance.get("learn_run") or provenance.get("library"):
        return "Training-Free GRPO (experience library)"
    if provenance.get("finetune_method"):
        return f"fine-tuned ({provenance['finetune_method']})"
    if provenance.get("finetune_wall_s") is not None or provenance.get("adapter"):
        return "fine-tuned (LoRA adapter)"
    return "base model"


def _eval_tokens(tokens: dict[str, Any]) -> str:
    """`prompt (cached) / completion`; the cached part is the provider's prompt cache, billed at its cached rate."""
    prompt = tokens.get("prompt", "–")
    cached = f" ({tokens['cached_prompt']} cached)" if tokens.get("cached_prompt") is not None else ""
    return f"{prompt}{cached} / {tokens.get('completion', '–')}"


def _training_cost(system: SystemSummary) -> str:
    provenance = system.provenance
    return _usd(provenance.get("learn_cost_usd")) if provenance.get("learn_cost_usd") is not None else "–"


def _training_time(system: SystemSummary) -> str:
    provenance = system.provenance
    parts = []
    if provenance.get("learn_wall_s") is not None:
        parts.append(f"learn {_duration(provenance['learn_wall_s'])}")
    if provenance.get("finetune_wall_s") is not None:
        parts.append(f"fine-tune {_duration(provenance['finetune_wall_s'])}")
    return ", ".join(parts) or "–"


__all__ = ["ALPHA", "Table", "build_tables"]
