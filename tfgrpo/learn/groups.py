"""A query's group of rollouts in a learn step, and whether it can teach anything.

A group teaches only when its rollouts disagree: at least two valid, scored rollouts whose rewards
spread beyond `std_threshold`. Without ground truth, the group's majority answer is the gold
(a pseudo-label, by the same majority rule as maj@k).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from tfgrpo.core.answers import is_correct, majority_vote
from tfgrpo.core.datasets import Problem
from tfgrpo.experiences.model import Library
from tfgrpo.learn.config import LearnConfig
from tfgrpo.rewards.extraction import extract_answer
from tfgrpo.rollout.sampling import Rollout, score_group


@dataclass
class Group:
    """One query's rollouts and what became of them."""

    problem: Problem
    experiences: str  # the library text injected into its prompt
    injected_ids: list[str]
    rollouts: list[Rollout]
    gold: str | None = None
    gold_is_pseudo: bool = False
    status: str = "kept"  # kept | homogeneous | too_few_valid | no_majority
    mean: float | None = None
    std: float | None = None
    #: sample index -> the library text of a rollout that left experiences out (tfgrpo.learn.credit)
    sample_experiences: dict[int, str] = field(default_factory=dict)

    def context_of(self, rollout: Rollout) -> list[str]:
        """The experiences a rollout had in its prompt: the group's, less those it left out."""
        return [i for i in self.injected_ids if i not in rollout.left_out]


def record_usage(library: Library, group: Group) -> None:
    """Each valid rollout counted on the experiences it had in context: one pass over the library per distinct
    context (the group's prompt, and each leave-out's), not one per sample."""
    counts: dict[tuple[str, ...], list[int]] = {}
    for rollout in group.rollouts:
        if rollout.ok:
            tally = counts.setdefault(tuple(group.context_of(rollout)), [0, 0, 0])
            correct = None if rollout.reward is None else is_correct(rollout.reward)
            tally[0] += 1
            tally[1] += correct is True
            tally[2] += correct is False
    for ids, (rollouts, right, wrong) in counts.items():
        library.record_rollouts(ids, rollouts=rollouts, correct=right, wrong=wrong)


def assess_group(group: Group, reward: Any, config: LearnConfig) -> None:
    """Rewards for the valid rollouts, then whether the group can teach anything."""
    valid = [r for r in group.rollouts if r.ok]
    if len(valid) < min(2, config.group_size):
        group.status = "too_few_valid"
        return
    if config.ground_truth:
        group.gold = group.problem.answer
    else:
        # the shared majority rule (ties to the answer voted first), so the pseudo-label is maj@k's answer
        vote = majority_vote([extract_answer(r.completion) for r in valid])
        group.gold, group.gold_is_pseudo = (None if vote is None else vote.first), True
        if group.gold is None:
            group.status = "no_majority"
            return
    score_group(reward, group.rollouts, group.gold, {"problem": group.problem.problem})
    # An unscorable rollout (reward None) is no evidence either way: left out like a failed call.
    rewards = [r.reward for r in valid if r.reward is not None]
    if len(rewards) < min(2, config.group_size):
        group.status = "too_few_valid"
        return
    group.mean, group.std = statistics.fmean(rewards), statistics.pstdev(rewards)
    if config.group_size > 1 and group.std <= config.std_threshold:
        group.status = "homogeneous"
