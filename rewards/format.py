"""Format rewards for RL baselines: a regex, or the `<think>...</think>` + `\\boxed{}` layout."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from tfgrpo.rewards.base import Reward, Score, completion_text
from tfgrpo.rewards.errors import RewardError
from tfgrpo.rewards.extraction import last_boxed
from tfgrpo.rewards.params import flag

_THINK = re.compile(r"<think>(?P<thought>.*?)</think>(?P<rest>.*)", re.DOTALL)


class FormatReward(Reward):
    """1.0 when the completion has the required shape, else 0.0 (never None: any text has a shape).

    Args:
        pattern: a regular expression the completion must match (`re.search`, DOTALL; `fullmatch=True`
            anchors it to the whole completion). When given, the two checks below are off unless set.
        require_think: a non-empty `<think>...</think>` block must come first.
        require_boxed: a balanced `\\boxed{...}` must appear (after the thinking, if required).
    """

    name = "format"

    def __init__(
        self,
        pattern: str | None = None,
        *,
        fullmatch: bool = False,
        require_think: bool | None = None,
        require_boxed: bool | None = None,
    ) -> None:
        super().__init__()
        try:
            self._regex = re.compile(pattern, re.DOTALL) if pattern is not None else None
        except re.error as exc:
            raise RewardError(f"format reward: invalid regex {pattern!r}: {exc}") from exc
        self.pattern = pattern
        self.fullmatch = flag(self.name, "fullmatch", fullmatch)
        default = pattern is None
        self.require_think = default if require_think is None else flag(self.name, "require_think", require_think)
        self.require_boxed = default if require_boxed is None else flag(self.name, "require_boxed", require_boxed)

    def score(self, completions: Sequence[Any], prompts: Sequence[Any] | None = None, **columns: Any) -> list[Score]:
        return [self._one(completion_text(completion)) for completion in completions]

    def _one(self, text: str) -> Score:
        if self._regex is not None:
            found = self._regex.fullmatch(text.strip()) if self.fullmatch else self._regex.search(text)
            if not found:
                return Score(0.0, None, f"does not match the pattern {self.pattern!r}")
        answer_part = text
        if self.require_think:
            think = _THINK.match(text.lstrip())
            if think is None or not think.group("thought").strip():
                return Score(0.0, None, "missing a non-empty <think>...</think> block at the start")
            answer_part = think.group("rest")
        boxed = last_boxed(answer_part) if self.require_boxed else None
        if self.require_boxed and boxed is None:
            where = " after </think>" if self.require_think else ""
            return Score(0.0, None, f"missing a \\boxed{{...}} answer{where}")
        return Score(1.0, boxed, "well formatted")


__all__ = ["FormatReward"]
