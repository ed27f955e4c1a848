"""Majority-vote pseudo-labels, for learning without ground truth (the method's self-discrimination mode).

The vote is `tfgrpo.core.answers.majority_vote` (classes by `vote_key`, unparsable answers never vote,
ties to the class voted first), the same function as maj@k in eval and learn's pseudo-label. This reward
passes another default for a tie: no pseudo-gold (`ties="none"`), since scoring a TRL batch against a
coin flip teaches noise; `ties="first"` gives the shared rule. With `min_share`, the winner needs that
share of ALL G completions (unparsable ones included).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tfgrpo.core.answers import TieRule, majority_vote
from tfgrpo.rewards.base import Reward, Score, completion_text
from tfgrpo.rewards.errors import RewardError
from tfgrpo.rewards.extraction import extract_answer
from tfgrpo.rewards.math import _compare
from tfgrpo.rewards.params import choice, number, optional_count, share
from tfgrpo.rewards.verifier import shared_verifier


def group_indices(
    n: int, *, prompts: Sequence[Any] | None, columns: dict[str, Any], group_key: str, group_size: int | None
) -> list[list[int]]:
    """Which completions belong together: fixed-size chunks, a group column, equal prompts, or all."""
    if group_size:
        if n % group_size:
            raise RewardError(f"majority reward: {n} completions do not split into groups of {group_size}")
        return [list(range(start, start + group_size)) for start in range(0, n, group_size)]
    labels: Sequence[Any] | None = columns.get(group_key)
    if labels is None and prompts is not None:
        labels = [p if isinstance(p, str) else json.dumps(p, sort_keys=True, default=str) for p in prompts]
    if labels is None:
        return [list(range(n))]
    if len(labels) != n:
        raise RewardError(f"majority reward: {len(labels)} group labels for {n} completions")
    groups: dict[Any, list[int]] = {}
    for index, label in enumerate(labels):
        groups.setdefault(label if isinstance(label, (str, int, float, tuple)) else str(label), []).append(index)
    return list(groups.values())


class MajorityReward(Reward):
    """Scores each completion against its group's majority answer (1.0 agree, 0.0 disagree or unparsable).

    When a group has no pseudo-gold (tie, nothing parsable, below `min_share`) its completions score None.
    Groups: `group_size` consecutive completions; else the `group_key` column (default `query_id`); else
    equal prompts (TRL repeats each prompt for its G generations); else the whole batch.
    """

    name = "majority"

    def __init__(
        self,
        *,
        group_key: str = "query_id",
        group_size: int | None = None,
        ties: TieRule = "none",
        min_share: float = 0.0,
        timeout_s: float = 1.0,
    ) -> None:
        super().__init__()
        self.group_key = group_key
        self.group_size = optional_count(self.name, "group_size", group_size)
        choice(self.name, "ties", ties, ("none", "first"))
        self.ties = ties
        self.min_share = share(self.name, "min_share", min_share)
        self.timeout_s = number(self.name, "timeout_s", timeout_s)

    def score(self, completions: Sequence[Any], prompts: Sequence[Any] | None = None, **columns: Any) -> list[Score]:
        extracted = [extract_answer(completion_text(c)) for c in completions]
        groups = group_indices(
            len(completions), prompts=prompts, columns=columns, group_key=self.group_key, group_size=self.group_size
        )
        scores: list[Score | None] = [None] * len(completions)
        pairs: list[tuple[int, str, str, int]] = []
        for group in groups:
            answers = [extracted[i] for i in group]
            vote = majority_vote(answers, ties=self.ties, min_share=self.min_share)
            if vote is None:
                for i in group:
                    scores[i] = Score(None, extracted[i], "no majority answer in the group (tie or nothing parsable)")
                continue
            pseudo, votes = vote.first, len(vote.indices)
            for i in group:
                answer = extracted[i]
                if answer is None:
                    scores[i] = Score(0.0, None, f"no answer found; majority answer {pseudo} ({votes}/{len(group)})")
                else:
                    pairs.append((i, pseudo, answer, votes))
        verdicts = _compare(
            [(pseudo, pred) for _, pseudo, pred, _ in pairs], shared_verifier(timeout_s=self.timeout_s)
        )
        for (i, pseudo, pred, votes), verdict in zip(pairs, verdicts, strict=True):
            size = next(len(g) for g in groups if i in g)
            agrees = verdict.equal is True
            scores[i] = Score(
                1.0 if agrees else 0.0,
                pred,
                f"{'agrees' if agrees else 'disagrees'} with the majority answer {pseudo} ({votes}/{size} votes)",
            )
        return scores  # type: ignore[return-value]


__all__ = ["MajorityReward", "group_indices"]
