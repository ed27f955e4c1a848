"""Credit in a learn run: a randomized design inside the rollouts already paid for, and what it retires.

Each rollout leaves out each experience of its prompt with probability `credit_leave_out`, drawn from a hash
of (seed, step, query, sample, experience), so a resumed run sends the very same prompts. Within a query the
coin alone decides which rollouts had an experience, so the difference of their rewards is its causal effect
on that query (`tfgrpo.experiences.credit.Credit` accumulates them, with an interval). Every scored group counts,
homogeneous ones included: a lesson that makes every rollout with it fail shows here even when no group
reaches stage 2. An experience whose interval lies below 0 is retired: deleted, with the reason `credit`,
and its text refused from then on. A modify that changes what a lesson says becomes an add, so that the
evidence about the old text is not thrown away with it. No LLM call is added: the leave-outs are some of
the G rollouts.

A step whose training reward falls far below the step before's (`reward_collapse`) is recorded and said:
with `batch_size` unset every step is the same problems, so the two are comparable.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from tfgrpo.core.datasets import Problem
from tfgrpo.experiences.apply import ApplyResult, apply_operations
from tfgrpo.experiences.contrast import meaning_difference
from tfgrpo.experiences.model import Experience, Library
from tfgrpo.experiences.ops import AddOp, DeleteOp, ModifyOp, Operation
from tfgrpo.learn.config import LearnConfig
from tfgrpo.rollout.sampling import PromptSpec

if TYPE_CHECKING:
    from tfgrpo.learn.metrics import StepCounters

#: A collapse: the training accuracy fell by at least this much, and Fisher's exact test puts it beyond chance.
COLLAPSE_DROP = 0.2
COLLAPSE_P = 0.01
#: The leave-out probability of an experience measured and not found to help (benchmarks/credit_world.py).
SUSPECT_LEAVE_OUT = 0.5


def left_out(rates: dict[str, float], *, seed: int, step: int, query_id: str, sample: int) -> list[str]:
    """The experiences (keys of `rates`: id -> its leave-out probability) that this rollout leaves out."""
    return [i for i, rate in rates.items() if rate > 0 and _uniform(seed, step, query_id, sample, i) < rate]


def leave_out_rate(experience: Experience, config: LearnConfig) -> float:
    """`credit_leave_out`, raised to SUSPECT_LEAVE_OUT for an experience measured not to help so far: the evidence
    gathers where a retirement may be due, and two harmful lessons that mask each other (either one spoils the
    answer) are left out together often enough to show. The rate is fixed for a step, so each query's with /
    without comparison stays a randomized one."""
    rate, verdict = (
        config.credit_leave_out,
        experience.credit.verdict(min_groups=config.credit_min_groups, level=config.credit_level),
    )
    return max(rate, SUSPECT_LEAVE_OUT) if rate > 0 and verdict in ("hurts", "unclear") else rate


def _uniform(*parts: object) -> float:
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def leave_out_variants(
    config: LearnConfig,
    step: int,
    prompt: PromptSpec,
    problem: Problem,
    injector: Any,
    chosen: list[Experience],
    offset: int,
) -> dict[int, tuple[list[dict[str, str]], str, list[str]]]:
    """Sample index -> (its messages, its experiences' text, the ids it leaves out), for the rollouts of a
    group that leave any experience out; the others are sent the group's prompt."""
    variants = {}
    rates = {e.id: leave_out_rate(e, config) for e in chosen}
    for index in range(config.group_size):
        left = left_out(rates, seed=config.seed, step=step, query_id=problem.id, sample=offset + index)
        if left:
            text = injector.text_for(problem.problem, [e for e in chosen if e.id not in left])
            variants[index] = (prompt.messages(problem.problem, text), text, left)
    return variants


def measure(
    config: LearnConfig, library: Library, groups: list[Any], counters: StepCounters, previous: dict[str, Any] | None
) -> list[Experience]:
    """The step's contrasts added to `library`'s credit, a collapse from the `previous` step's metrics
    recorded in `counters`; returns the experiences to retire."""
    counters.credit_contrasts = record_credit(library, groups)
    counters.reward_collapse = reward_collapse(previous, counters.correct, counters.rollouts_scored)
    if not config.credit_retire:
        return []
    return harmful(library, min_groups=config.credit_min_groups, level=config.credit_level)


def retire(
    config: LearnConfig, applied: ApplyResult, retiring: list[Experience], step: int, counters: StepCounters
) -> list[dict[str, Any]]:
    """Remember as retired (in the applied library) those of `retiring` whose delete was applied; their
    history records, also in `counters`."""
    deleted = {item.ids[0] for item in applied.applied if isinstance(item.operation, DeleteOp)}
    retired = [e for e in retiring if e.id in deleted]
    for experience in retired:
        applied.library.retire(experience, step=step)
    counters.retired = retirement_records(retired, min_groups=config.credit_min_groups, level=config.credit_level)
    return counters.retired


def prune_by_credit(library: Library, *, min_groups: int, level: float) -> tuple[ApplyResult, list[dict[str, Any]]]:
    """`tfgrpo library prune --by-credit`: what a learn step would retire, done offline (a new version)."""
    retiring = harmful(library, min_groups=min_groups, level=level)
    result = apply_operations(library, [DeleteOp(id=e.id) for e in retiring], step=library.step, max_words=None)
    for experience in retiring:
        result.library.retire(experience, step=library.step)
    return result, retirement_records(retiring, min_groups=min_groups, level=level)


def keep_rewrites(library: Library, operations: list[Operation], counters: StepCounters) -> list[Operation]:
    """A modify that changes what a lesson says (a number, an operator, a term: experiences.contrast) becomes an
    add: the old lesson keeps its credit and the new one earns its own, where a rewrite would throw away the
    evidence ("37" rewritten into "73" by a model as sure of the one as of the other)."""
    kept: list[Operation] = []
    for operation in operations:
        current = library.get(operation.id) if isinstance(operation, ModifyOp) else None
        if current is not None and meaning_difference(current.text, operation.experience):
            kept.append(AddOp(experience=operation.experience))
            counters.credit_rewrites_kept += 1
        else:
            kept.append(operation)
    return kept


def collapse_line(collapse: dict[str, Any]) -> str:
    return (
        f"training accuracy collapsed after step {collapse['from_step']}: {collapse['accuracy_before']:.3f} -> "
        f"{collapse['accuracy']:.3f} (Fisher p = {collapse['p']:.2g}); see each experience's credit in metrics.json"
    )


def summary_lines(metrics: dict[str, Any]) -> list[str]:
    """The run summary's credit part: each final experience's effect, what was retired, any collapse."""
    lines = []
    for row in metrics.get("credit") or []:
        if row["effect"] is None:
            continue
        interval = f" [{row['low']:+.2f}, {row['high']:+.2f}]" if row["low"] is not None else ""
        lines.append(
            f"  {row['id']}: {row['effect']:+.2f}{interval} n={row['groups']} {row['verdict']}: {row['text'][:80]}"
        )
    if lines:
        lines.insert(
            0, "credit (reward with minus without the experience, 95% CI, n = queries; metrics.json 'credit'):"
        )
    for row in metrics.get("retired") or []:
        effect = row["credit"]
        lines.append(
            f"retired by credit at step {row['step']}: {row['ids'][0]} ({effect['effect']:+.2f} "
            f"[{effect['low']:+.2f}, {effect['high']:+.2f}] n={effect['groups']}): {row['text'][:80]}"
        )
    lines += [f"step {row['step']}: {collapse_line(row)}" for row in metrics.get("reward_collapses") or []]
    return lines


def record_credit(library: Library, groups: Iterable[Any]) -> int:
    """Add every group's with/without contrast to its experiences' credit (in place); returns how many."""
    contrasts = 0
    for group in groups:
        scored = [r for r in group.rollouts if r.ok and r.reward is not None]
        if not any(r.left_out for r in scored):
            continue
        for experience_id in group.injected_ids:
            experience = library.get(experience_id)
            if experience is None:
                continue
            with_it = [r.reward for r in scored if experience_id not in r.left_out]
            without = [r.reward for r in scored if experience_id in r.left_out]
            if with_it and without:
                experience.credit.add(with_it, without)
                contrasts += 1
    return contrasts


def harmful(library: Library, *, min_groups: int, level: float) -> list[Experience]:
    """The experiences whose effect's interval lies wholly below 0, at `level` shared among the experiences
    judged at once (Bonferroni): one test per experience per step would otherwise retire a neutral lesson in
    about every third run of a library of ten."""
    judged = [e for e in library if e.credit.groups >= min_groups]
    if not judged:
        return []
    corrected = 1 - (1 - level) / len(judged)
    return [e for e in judged if e.credit.verdict(min_groups=min_groups, level=corrected) == "hurts"]


def retirement_records(retired: Iterable[Experience], *, min_groups: int, level: float) -> list[dict[str, Any]]:
    """One history record per retired experience: what it said and the evidence."""
    return [
        {
            "kind": "retired",
            "ids": [e.id],
            "text": e.text,
            "reason": "credit",
            "credit": e.credit.summary(min_groups=min_groups, level=level),
        }
        for e in retired
    ]


def reward_collapse(previous: dict[str, Any] | None, correct: int, scored: int) -> dict[str, Any] | None:
    """The drop from the step before (its metrics) to this one, when it is a collapse; else None."""
    if not previous or not previous.get("rollouts_scored") or not scored:
        return None
    before_correct, before_scored = previous["correct"], previous["rollouts_scored"]
    before, after = before_correct / before_scored, correct / scored
    if before - after < COLLAPSE_DROP:
        return None
    from scipy import stats

    table = [[before_correct, before_scored - before_correct], [correct, scored - correct]]
    p_value = float(stats.fisher_exact(table, alternative="greater").pvalue)
    if p_value >= COLLAPSE_P:
        return None
    return {
        "from_step": previous["step"],
        "accuracy_before": round(before, 4),
        "accuracy": round(after, 4),
        "p": p_value,
    }


__all__ = [
    "collapse_line",
    "harmful",
    "keep_rewrites",
    "leave_out_variants",
    "left_out",
    "measure",
    "prune_by_credit",
    "record_credit",
    "retire",
    "retirement_records",
    "reward_collapse",
    "summary_lines",
]
