"""Accuracy metrics of K samples per problem: Mean@K, unbiased pass@k, maj@k, and a bootstrap CI.

Conventions (they are part of the `metrics.json` contract):
- A sample is *correct* when its reward is at least `correct_threshold` (0.5: math rewards are 0/1).
  A reward of None (the scorer could not decide) counts as incorrect and is counted in `unscored_samples`.
  A sample with an `error` (the model call failed) is left out of every metric and counted in
  `failed_samples`, since an outage says nothing about the model's skill.
- Mean@K is the mean over problems of (correct samples / samples): the average pass@1 over K samples.
- pass@k uses the unbiased estimator of Chen et al. (2021), 1 − C(n−c, k) / C(n, k), as a product so it
  never overflows; k runs over 1, 2, 4, … up to the smallest sample count of any problem, plus that count.
- maj@k votes with `tfgrpo.core.answers.majority_vote` over the extracted answers of a problem's samples,
  ordered by sample index: classes by `vote_key`, unparsable answers (None) never vote, so a problem only
  gets no majority answer when no sample gave one. **Tie rule** (the one rule, shared with learn's
  ground-truth-free pseudo-label): the class whose first vote has the lowest sample index wins. The
  majority answer is correct when any sample that gave it was scored correct (the reward already compared it with the gold answer), or,
  when an `answer_checker(gold, answer)` is passed, when that says so.
- The 95 % CI of Mean@K is a percentile bootstrap over problems (resampled with replacement), seeded
  (`scipy.stats.bootstrap`, method="percentile").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

# numpy is imported inside the functions that use it: `tfgrpo learn` sends its first request without it
# (70 ms of start-up, docs/performance.md).
from tfgrpo.core.answers import CORRECT_THRESHOLD, is_correct, majority_vote

N_BOOTSTRAP = 10_000
_BOOTSTRAP_BATCH = 2_000


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn without replacement from n (c correct) is correct."""
    import numpy as np

    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n (got n={n}, c={c})")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n (got n={n}, k={k})")
    if n - c < k:  # every draw of k samples contains a correct one
        return 1.0
    # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i)
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def ks_for(max_k: int) -> list[int]:
    """1, 2, 4, … ≤ max_k, plus max_k itself."""
    if max_k < 1:
        return []
    ks = [1 << i for i in range(max_k.bit_length()) if (1 << i) <= max_k]
    return ks if ks[-1] == max_k else [*ks, max_k]


def mean_at_k(per_problem: Iterable[tuple[int, int]]) -> float:
    """Mean over problems of c/n, from (n, c) pairs."""
    import numpy as np

    fractions = [c / n for n, c in per_problem if n > 0]
    if not fractions:
        raise ValueError("no problem has any sample")
    return float(np.mean(fractions))


def majority_answer(answers: Sequence[str | None]) -> tuple[str | None, list[int]]:
    """(winning vote class, indices into `answers` that gave it): `tfgrpo.core.answers.majority_vote`."""
    vote = majority_vote(answers)
    return (None, []) if vote is None else (vote.key, list(vote.indices))


def bootstrap_ci(
    values: Sequence[float], *, seed: int = 0, n_bootstrap: int = N_BOOTSTRAP, level: float = 0.95
) -> list[float]:
    """Percentile bootstrap CI of the mean of `values` (one value per problem), via `scipy.stats.bootstrap`."""
    import numpy as np

    data = np.asarray(values, dtype=np.float64)
    if data.size == 0:
        raise ValueError("no values to bootstrap")
    if data.size == 1 or np.all(data == data[0]):
        # scipy refuses degenerate data (one distinct value); its CI is that value
        return [float(data[0]), float(data[0])]
    from scipy import stats as scipy_stats  # 0.8 s to import: only when a statistic is computed

    result = scipy_stats.bootstrap(
        (data,),
        np.mean,
        n_resamples=n_bootstrap,
        batch=_BOOTSTRAP_BATCH,  # bounds memory at batch × problems indices, whatever the problem count
        vectorized=True,
        confidence_level=level,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return [float(result.confidence_interval.low), float(result.confidence_interval.high)]


def problem_results(
    samples: Iterable[Mapping[str, Any]],
    *,
    correct_threshold: float = CORRECT_THRESHOLD,
    answer_checker: Callable[[str, str], bool] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Group sample rows by problem (first-seen order) → per-problem results and sample counters."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    counters = {"num_samples": 0, "failed_samples": 0, "unscored_samples": 0}
    for row in samples:
        groups.setdefault(str(row["problem_id"]), []).append(row)

    results = []
    for problem_id, rows in groups.items():
        rows = sorted(rows, key=lambda r: r.get("sample") or 0)
        failed = [r for r in rows if r.get("error")]
        scored = [r for r in rows if not r.get("error")]
        unscored = sum(1 for r in scored if r.get("reward") is None)
        counters["failed_samples"] += len(failed)
        counters["unscored_samples"] += unscored
        counters["num_samples"] += len(scored)
        correct_flags = [is_correct(r.get("reward"), correct_threshold) for r in scored]
        maj, maj_indices = majority_answer([r.get("extracted") for r in scored])
        gold = str(rows[0].get("gold", ""))
        if maj is None:
            maj_correct = False
        elif answer_checker is not None:
            maj_correct = bool(answer_checker(gold, str(scored[maj_indices[0]].get("extracted"))))  # as first spelled
        else:
            maj_correct = any(correct_flags[i] for i in maj_indices)
        n, c = len(scored), sum(correct_flags)
        results.append(
            {
                "id": problem_id,
                "gold": gold,
                "correct": c,
                "n": n,
                "mean": c / n if n else None,
                "maj_answer": maj,
                "maj_correct": maj_correct,
                "unscored": unscored,
                "failed": len(failed),
            }
        )
    return results, counters


def aggregate(
    per_problem: Sequence[Mapping[str, Any]], *, seed: int = 0, n_bootstrap: int = N_BOOTSTRAP
) -> dict[str, Any]:
    """Mean@K, pass@k, maj@k and the CI from per-problem results (used for a run and for any subset)."""
    import numpy as np

    usable = [p for p in per_problem if p["n"] > 0]
    if not usable:
        raise ValueError("no problem has a scored sample")
    min_n = min(p["n"] for p in usable)
    means = [p["correct"] / p["n"] for p in usable]
    return {
        "mean_at_k": float(np.mean(means)),
        "k": max(p["n"] for p in usable),
        "min_samples_per_problem": min_n,
        "pass_at_k": {
            str(k): float(np.mean([pass_at_k(p["n"], p["correct"], k) for p in usable])) for k in ks_for(min_n)
        },
        "maj_at_k": float(np.mean([bool(p["maj_correct"]) for p in usable])),
        "ci95": bootstrap_ci(means, seed=seed, n_bootstrap=n_bootstrap),
        "num_problems": len(usable),
    }


def summarize(
    samples: Iterable[Mapping[str, Any]],
    *,
    seed: int = 0,
    n_bootstrap: int = N_BOOTSTRAP,
    correct_threshold: float = CORRECT_THRESHOLD,
    answer_checker: Callable[[str, str], bool] | None = None,
) -> dict[str, Any]:
    """The metrics.json body for one eval run's sample rows (see the module doc for the rules)."""
    import numpy as np

    rows = list(samples)
    per_problem, counters = problem_results(rows, correct_threshold=correct_threshold, answer_checker=answer_checker)
    if not any(p["n"] for p in per_problem):
        raise ValueError(f"no scored samples among {len(rows)} rows ({counters['failed_samples']} failed)")
    scored = [r for r in rows if not r.get("error")]
    rewards = [float(r["reward"]) if r.get("reward") is not None else 0.0 for r in scored]
    summary = aggregate(per_problem, seed=seed, n_bootstrap=n_bootstrap)
    summary.update(
        {
            "num_samples": counters["num_samples"],
            "failed_samples": counters["failed_samples"],
            "unscored_samples": counters["unscored_samples"],
            "problems_without_samples": [p["id"] for p in per_problem if p["n"] == 0],
            "mean_reward": float(np.mean(rewards)),
            "correct_threshold": correct_threshold,
            "ci_method": f"percentile bootstrap over problems, {n_bootstrap} resamples, seed {seed}",
            "tokens": {
                "prompt": _sum_int(rows, "prompt_tokens"),
                "cached_prompt": _sum_int(rows, "cached_prompt_tokens"),
                "completion": _sum_int(rows, "completion_tokens"),
                "mean_completion": _sum_int(scored, "completion_tokens") / len(scored) if scored else 0.0,
            },
            "cost_usd": math.fsum(float(r.get("cost_usd") or 0.0) for r in rows),
            "per_problem": per_problem,
        }
    )
    return summary


def _sum_int(rows: Iterable[Mapping[str, Any]], key: str) -> int:
    return int(sum(int(r.get(key) or 0) for r in rows))


__all__ = [
    "CORRECT_THRESHOLD",
    "aggregate",
    "bootstrap_ci",
    "is_correct",
    "ks_for",
    "majority_answer",
    "mean_at_k",
    "pass_at_k",
    "problem_results",
    "summarize",
]
