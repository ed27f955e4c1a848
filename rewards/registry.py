"""Rewards by name, and weighted combinations of them."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tfgrpo.rewards.base import Reward, Score
from tfgrpo.rewards.errors import RewardError

#: name -> (module, class): a reward's module is imported when that reward is built, not with the registry
_FACTORIES = {
    "math": ("tfgrpo.rewards.math", "MathReward"),
    "exact": ("tfgrpo.rewards.exact", "ExactMatchReward"),
    "choice": ("tfgrpo.rewards.choice", "ChoiceReward"),
    "numeric": ("tfgrpo.rewards.numeric", "NumericReward"),
    "format": ("tfgrpo.rewards.format", "FormatReward"),
    "code": ("tfgrpo.rewards.code", "CodeReward"),
    "judge": ("tfgrpo.rewards.judge", "JudgeReward"),
    "majority": ("tfgrpo.rewards.majority", "MajorityReward"),
}

REWARD_NAMES = tuple(_FACTORIES)


def _factory(name: str) -> Callable[..., Reward]:
    module, attribute = _FACTORIES[name]
    return getattr(importlib.import_module(module), attribute)


def get_reward(name: str, **params: Any) -> Reward:
    """A reward by name, e.g. `get_reward("numeric", rel_tol=0.01)` or `get_reward("judge", complete=fn)`."""
    if name not in _FACTORIES:
        raise RewardError(f"unknown reward {name!r}; choose one of: {', '.join(REWARD_NAMES)}")
    factory = _factory(name)
    try:
        return factory(**params)
    except TypeError as exc:  # wrong or missing parameter: say which reward and what it accepts
        raise RewardError(f"reward {name!r}: {exc}") from exc


class CombinedReward(Reward):
    """The weighted sum of several rewards. A component that returns None is left out of that sample's
    sum (as TRL does with NaN rewards); a sample where every component is None scores None."""

    name = "combined"

    def __init__(self, weighted: Mapping[Reward | str, float]) -> None:
        if not weighted:
            raise RewardError("combine needs at least one reward")
        self.components: list[tuple[Reward, float]] = []
        for reward, weight in weighted.items():
            component = get_reward(reward) if isinstance(reward, str) else reward
            if not isinstance(component, Reward):
                raise RewardError(f"combine: {reward!r} is not a reward (use get_reward or a Reward instance)")
            self.components.append((component, float(weight)))
        self.name = "+".join(f"{w:g}*{r.name}" for r, w in self.components)
        super().__init__()

    def score(self, completions: Sequence[Any], prompts: Sequence[Any] | None = None, **columns: Any) -> list[Score]:
        per_component = [(r, w, r.score(completions, prompts=prompts, **columns)) for r, w in self.components]
        scores = []
        for index in range(len(completions)):
            parts = [(r, w, scored[index]) for r, w, scored in per_component]
            known = [(w, s.value) for _, w, s in parts if s.value is not None]
            value = sum(w * v for w, v in known) if known else None
            extracted = next((s.extracted for _, _, s in parts if s.extracted is not None), None)
            reason = "; ".join(
                f"{r.name}={'None' if s.value is None else f'{s.value:g}'} ({s.reason})" for r, _, s in parts
            )
            scores.append(Score(value, extracted, reason))
        return scores


def combine(weighted: Mapping[Reward | str, float]) -> CombinedReward:
    """`combine({get_reward("math"): 1.0, get_reward("format"): 0.2})` (names work as keys too)."""
    return CombinedReward(weighted)


__all__ = ["REWARD_NAMES", "CombinedReward", "combine", "get_reward"]
