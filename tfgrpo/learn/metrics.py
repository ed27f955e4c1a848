"""What a learn run counts, per step, per epoch and in total: the keys of its `metrics.json`.

steps[]:   step, epoch, batch, queries, rollouts, rollouts_failed, rollouts_unscored, rollouts_scored, accuracy,
           groups_{total,kept,skipped_homogeneous,skipped_too_few_valid,skipped_no_majority,skipped_no_summaries},
           summaries, summaries_failed, group_calls_failed, ops_proposed, ops_final, ops_applied,
           ops_rejected, ops_evicted, parse_retries, parse_failures, consolidation_failed,
           api_failures, prompt_tokens, cached_prompt_tokens (provider prompt cache),
           uncached_prompt_tokens, completion_tokens, cached_samples (our response cache), cost_usd, wall_time_s,
           retries_{rate_limit,server_error,timeout,bad_body,connection} (transient failures retried),
           stage_seconds {rollouts, summaries, group_advantage, consolidation}, library_version, library_size,
           leaks_rejected, leaks_flagged, leakage [{action, kind, problem_id, source, evidence, tied, tie_evidence, text, op}],
           dedup_merged, dedup_dropped, dedup [{action, operation, text, neighbour_id, neighbour_text, similarity,
           lexical}] (dedup: enforce),
           stage_replies {group, consolidate: {replies, enforced, parsed, repaired, retried, lost}}
epochs[]:  epoch, steps, accuracy (over the epoch's scored rollouts), library_size, val_mean_at_k
leakage:   every leakage finding of the run, with its step (see tfgrpo.learn.guards)
totals:    sums of the step counters + validation cost, rollouts, cost_usd, wall_time_s (all sessions)
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from tfgrpo.core.answers import is_correct
from tfgrpo.llm.accounting import RETRY_CAUSES, retries_line

#: How the structured replies of stages 2 and 3 fared: generated under the schema (enforced), used as they
#: came (parsed: strict JSON, first try), fixed by the tolerant parser (repaired), asked again (retried),
#: and given up on (lost: the call failed or the retry was still unusable).
REPLY_COUNTS = ("replies", "enforced", "parsed", "repaired", "retried", "lost")
STRUCTURED_STAGES = ("group", "consolidate")


def empty_reply_counts() -> dict[str, dict[str, int]]:
    return {stage: dict.fromkeys(REPLY_COUNTS, 0) for stage in STRUCTURED_STAGES}


@dataclass
class StepCounters:
    step: int
    epoch: int
    batch: int
    queries: int
    rollouts: int = 0
    rollouts_failed: int = 0
    rollouts_unscored: int = 0
    rollouts_scored: int = 0
    correct: int = 0
    groups_total: int = 0
    groups_kept: int = 0
    groups_skipped_homogeneous: int = 0
    groups_skipped_too_few_valid: int = 0
    groups_skipped_no_majority: int = 0
    groups_skipped_no_summaries: int = 0
    summaries: int = 0
    summaries_failed: int = 0
    group_calls_failed: int = 0
    ops_proposed: int = 0
    ops_final: int = 0
    ops_applied: int = 0
    ops_rejected: int = 0
    ops_evicted: int = 0
    parse_retries: int = 0
    parse_failures: int = 0
    consolidation_failed: bool = False
    api_failures: int = 0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = (
        0  # of prompt_tokens: served from the provider's prompt cache, billed at its cached rate
    )
    uncached_prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_samples: int = 0
    retries_rate_limit: int = 0
    retries_server_error: int = 0
    retries_timeout: int = 0
    retries_bad_body: int = 0
    retries_connection: int = 0
    leaks_rejected: int = 0  # findings of the leakage guard on rejected operations
    leaks_flagged: int = 0  # ... on operations applied anyway (mode flag)
    leakage: list[dict[str, Any]] = field(default_factory=list)
    dedup_merged: int = 0  # proposed lessons folded into a near-duplicate (dedup: enforce)
    dedup_dropped: int = 0  # ... left out: their near-duplicate already says as much
    dedup: list[dict[str, Any]] = field(default_factory=list)
    credit_contrasts: int = 0  # (query, experience) pairs with rollouts both with and without it
    credit_rewrites_kept: int = 0  # modifies that changed what a lesson says, applied as adds (credit)
    retired: list[dict[str, Any]] = field(default_factory=list)  # experiences credit retired (history records)
    reward_collapse: dict[str, Any] | None = None  # tfgrpo.learn.credit.reward_collapse
    val_mean_at_k: float | None = None  # this step's candidate library on validation (select_by: step, or gate)
    gate: dict[str, Any] | None = None  # the gate's decision on this step (tfgrpo.learn.selection.gate_decision)
    cost_usd: float = 0.0
    wall_time_s: float = 0.0
    library_version: int = 0
    library_size: int = 0
    stage_seconds: dict[str, float] = field(default_factory=dict)
    stage_replies: dict[str, dict[str, int]] = field(default_factory=empty_reply_counts)
    _lap_start: float = field(default_factory=time.perf_counter, repr=False)

    def lap(self, stage: str) -> None:
        """Record the wall time of the stage that just ended."""
        now = time.perf_counter()
        self.stage_seconds[stage] = round(now - self._lap_start, 3)
        self._lap_start = now

    def count_groups(self, groups: list[Any]) -> None:
        self.groups_total = len(groups)
        for group in groups:
            self.rollouts += len(group.rollouts)
            for rollout in group.rollouts:
                if not rollout.ok:
                    self.rollouts_failed += 1
                elif rollout.reward is not None:
                    self.rollouts_scored += 1
                    self.correct += is_correct(rollout.reward)
                else:
                    self.rollouts_unscored += 1
            self.groups_kept += group.status == "kept"
            self.groups_skipped_homogeneous += group.status == "homogeneous"
            self.groups_skipped_too_few_valid += group.status == "too_few_valid"
            self.groups_skipped_no_majority += group.status == "no_majority"

    def count_summaries(self, summaries: list[Any]) -> None:
        self.summaries = len(summaries)
        self.summaries_failed = sum(s.error is not None for s in summaries)

    def _count_reply(self, reply: Any, stage: str) -> None:
        self.parse_retries += reply.retried
        self.parse_failures += reply.malformed
        counts = self.stage_replies[stage]
        counts["replies"] += 1
        counts["enforced"] += reply.enforced
        counts["parsed"] += reply.strict
        counts["repaired"] += not reply.strict and not reply.retried and reply.error is None
        counts["retried"] += reply.retried
        counts["lost"] += reply.lost

    def count_analyses(self, analyses: list[Any]) -> None:
        for analysis in analyses:
            self.ops_proposed += len(analysis.reply.operations)
            self.ops_rejected += len(analysis.reply.rejected)
            self.group_calls_failed += analysis.reply.error is not None
            self._count_reply(analysis.reply, "group")

    def count_consolidation(self, consolidation: Any, applied: Any) -> None:
        if consolidation.reply is not None:
            self._count_reply(consolidation.reply, "consolidate")
            self.ops_rejected += len(consolidation.reply.rejected)
            self.consolidation_failed = consolidation.reply.error is not None or (
                consolidation.reply.malformed and not consolidation.reply.operations
            )
        self.ops_final = len(consolidation.final)
        self.ops_applied = len(applied.applied)
        self.ops_rejected += len(applied.rejected)
        self.ops_evicted = len(applied.evicted)

    def count_dedup(self, decisions: list[dict[str, Any]]) -> None:
        self.dedup = decisions
        self.dedup_merged = sum(d["action"] == "merged" for d in decisions)
        self.dedup_dropped = sum(d["action"] == "dropped" for d in decisions)

    def count_leakage(self, records: list[dict[str, Any]]) -> None:
        self.leakage = records
        self.leaks_rejected = sum(r["action"] == "rejected" for r in records)
        self.leaks_flagged = sum(r["action"] == "flagged" for r in records)
        self.ops_rejected += len({id(r["op"]) for r in records if r["action"] == "rejected"})

    def finish(self, usage_before: Any, usage_after: Any, wall_time_s: float, library: Any) -> None:
        self.api_failures = usage_after.failed_calls - usage_before.failed_calls
        self.prompt_tokens = usage_after.prompt_tokens - usage_before.prompt_tokens
        self.cached_prompt_tokens = usage_after.cached_prompt_tokens - usage_before.cached_prompt_tokens
        self.uncached_prompt_tokens = self.prompt_tokens - self.cached_prompt_tokens
        self.completion_tokens = usage_after.completion_tokens - usage_before.completion_tokens
        self.cached_samples = usage_after.cached_samples - usage_before.cached_samples
        for cause in RETRY_CAUSES:
            name = f"retries_{cause}"
            setattr(self, name, getattr(usage_after, name) - getattr(usage_before, name))
        self.cost_usd = round(usage_after.cost_usd - usage_before.cost_usd, 8)
        self.wall_time_s = round(wall_time_s, 3)
        self.library_version = library.version
        self.library_size = len(library)

    @property
    def accuracy(self) -> float | None:
        return self.correct / self.rollouts_scored if self.rollouts_scored else None

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("_lap_start")
        return {**data, "accuracy": self.accuracy}

    def one_line(self) -> str:
        accuracy = "n/a" if self.accuracy is None else f"{self.accuracy:.3f}"
        leaked_ops = len({id(r["op"]) for r in self.leakage if r["action"] == "rejected"})
        leaked = f" / rejected as leaks {leaked_ops}" if leaked_ops else ""
        retired = f" / retired by credit {len(self.retired)}" if self.retired else ""
        everything = (
            " (every final op was a leak: nothing learned)" if leaked_ops and leaked_ops == self.ops_final else ""
        )
        return (
            f"step {self.step} (epoch {self.epoch}, batch {self.batch}): accuracy {accuracy}, groups kept "
            f"{self.groups_kept}/{self.groups_total}, ops proposed {self.ops_proposed} / final {self.ops_final}"
            f"{leaked} / applied {self.ops_applied}{everything}{retired}, failed rollouts {self.rollouts_failed}, "
            f"library v{self.library_version} ({self.library_size} items), {self.wall_time_s:.1f}s"
        )


#: what a step says about itself rather than counts: never summed over steps
STEP_IDENTITY = ("step", "epoch", "batch", "library_version", "library_size")
#: the totals of `metrics.json` sum every integer counter of the steps (a flag counts the steps it was set)
SUMMED = tuple(f.name for f in fields(StepCounters) if f.type in ("int", "bool") and f.name not in STEP_IDENTITY)


def epoch_rows(state: Any) -> list[dict[str, Any]]:
    rows = []
    for epoch in sorted({s["epoch"] for s in state.steps}):
        steps = [s for s in state.steps if s["epoch"] == epoch]
        scored = sum(s["rollouts_scored"] for s in steps)
        validation = state.validation.get(epoch) or {}
        rows.append(
            {
                "epoch": epoch,
                "steps": len(steps),
                "complete": epoch in state.epoch_end_step,
                "accuracy": sum(s["correct"] for s in steps) / scored if scored else None,
                "library_size": steps[-1]["library_size"],
                "ops_applied": sum(s["ops_applied"] for s in steps),
                "cost_usd": round(sum(s["cost_usd"] for s in steps), 8),
                "val_mean_at_k": validation.get("mean_at_k"),
            }
        )
    return rows


def run_metrics(state: Any, *, best_epoch: int | None, library: Any, config: Any) -> dict[str, Any]:
    totals: dict[str, Any] = {key: sum(s.get(key, 0) for s in state.steps) for key in SUMMED}
    scored = totals["rollouts_scored"]
    validation_cost = sum(v.get("cost_usd", 0.0) for v in state.validation.values())
    totals.update(
        steps=len(state.steps),
        accuracy=totals["correct"] / scored if scored else None,
        # Sessions count every call made, also those of a step that was interrupted and redone.
        cost_usd=round(sum(s.get("cost_usd", 0.0) for s in state.sessions), 8),
        step_cost_usd=round(sum(s["cost_usd"] for s in state.steps), 8),
        validation_cost_usd=round(validation_cost, 8),
        wall_time_s=round(sum(s.get("wall_time_s", 0.0) for s in state.sessions), 3),
        sessions=len(state.sessions),
        library_size=len(library),
        library_version=library.version,
        stage_replies=sum_reply_counts(state.steps) | judge_reply_counts(state.sessions),
        # part of completion_tokens (priced as output); all sessions, like cost_usd
        reasoning_tokens=sum(
            ((s.get("usage") or {}).get("total") or {}).get("reasoning_tokens", 0) for s in state.sessions
        ),
        providers=dict((state.sessions[-1].get("providers") or {}) if state.sessions else {}),
    )
    totals["stage_replies_lost"] = sum(counts["lost"] for counts in totals["stage_replies"].values())
    return {
        "status": state.status,
        "completed_step": state.completed_step,
        "best_epoch": best_epoch,
        "group_size": config.group_size,
        "epochs_planned": config.epochs,
        "steps": state.steps,
        "epochs": epoch_rows(state),
        "validation": [state.validation[e] for e in sorted(state.validation)],
        "sessions": state.sessions,
        "totals": totals,
        "leakage": [{"step": s["step"], **r} for s in state.steps for r in s.get("leakage", [])],
        # each final experience's measured effect (experiences.credit), and what credit retired on the way
        "credit": [
            {
                "id": e.id,
                "text": e.text,
                **e.credit.summary(min_groups=config.credit_min_groups, level=config.credit_level),
            }
            for e in library
        ],
        "retired": [{"step": s["step"], **r} for s in state.steps for r in s.get("retired", [])],
        "reward_collapses": [
            {"step": s["step"], **s["reward_collapse"]} for s in state.steps if s.get("reward_collapse")
        ],
    }


def sum_reply_counts(steps: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    totals = empty_reply_counts()
    for step in steps:  # steps written before these counters existed have none
        for stage, counts in (step.get("stage_replies") or {}).items():
            for key, value in counts.items():
                totals.setdefault(stage, dict.fromkeys(REPLY_COUNTS, 0))[key] = totals[stage].get(key, 0) + value
    return totals


def judge_reply_counts(sessions: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """{"judge": counts} summed over the sessions' client usage (rollout and validation verdicts of a judge
    reward, `tfgrpo.rewards.verdict`); {} when no judge reward was used."""
    total: dict[str, int] = {}
    for session in sessions:
        counts = ((session.get("usage") or {}).get("structured_replies") or {}).get("judge") or {}
        for key, value in counts.items():
            total[key] = total.get(key, 0) + value
    return {"judge": {key: total.get(key, 0) for key in REPLY_COUNTS}} if total else {}


def reply_counts_line(counts: dict[str, dict[str, int]]) -> str:
    """'group 4 replies: 4 enforced, 3 parsed, 1 repaired, 0 retried, 0 lost; consolidate ...'"""
    parts = []
    for stage, c in counts.items():
        details = ", ".join(f"{c[key]} {key}" for key in REPLY_COUNTS[1:])
        parts.append(f"{stage} {c['replies']} replies: {details}")
    return "; ".join(parts)


def epoch_table(metrics: dict[str, Any]) -> Any:
    """The final summary as a rich table: accuracy, library size, cost and validation per epoch."""
    from rich.table import Table

    table = Table(title=f"tfgrpo learn: {metrics['status']}", show_lines=False)
    for name in ("epoch", "rollout acc.", "val Mean@k", "ops applied", "library size", "cost (USD)"):
        table.add_column(name, justify="right")
    for row in metrics["epochs"]:
        best = " *" if metrics.get("best_epoch") == row["epoch"] else ""
        table.add_row(
            f"{row['epoch']}{'' if row['complete'] else ' (partial)'}{best}",
            _fmt(row["accuracy"]),
            _fmt(row["val_mean_at_k"]),
            str(row["ops_applied"]),
            str(row["library_size"]),
            f"{row['cost_usd']:.4f}",
        )
    totals = metrics["totals"]
    table.caption = (
        f"{totals['rollouts']} rollouts ({totals['rollouts_failed']} failed calls, {totals['rollouts_unscored']} unscored), groups kept {totals['groups_kept']}/"
        f"{totals['groups_total']}, ops proposed {totals['ops_proposed']} → applied {totals['ops_applied']}, "
        f"parse retries {totals['parse_retries']} (failures {totals['parse_failures']}), tokens "
        f"{totals['prompt_tokens']:,} in ({totals.get('cached_prompt_tokens', 0):,} cached) / {totals['completion_tokens']:,} out"
        + (f" ({totals['reasoning_tokens']:,} reasoning)" if totals.get("reasoning_tokens") else "")
        + ", "
        f"${totals['cost_usd']:.4f}, "
        f"{totals['wall_time_s']:.1f}s; final library v{totals['library_version']} with {totals['library_size']} experiences"
        + f"; {retries_line(totals)}"
        + ("; * = best epoch on validation" if metrics.get("best_epoch") else "")
        + f"\nstage replies: {reply_counts_line(totals.get('stage_replies') or empty_reply_counts())}"
        + "".join(f"\nprovider {endpoint}: {profile}" for endpoint, profile in (totals.get("providers") or {}).items())
    )
    return table


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


__all__ = [
    "REPLY_COUNTS",
    "StepCounters",
    "epoch_table",
    "judge_reply_counts",
    "reply_counts_line",
    "run_metrics",
    "sum_reply_counts",
]
