"""The reward interface: a plain callable that TRL's `GRPOTrainer` accepts unchanged, plus per-sample `Score`s.

A reward is called the TRL way, `reward(prompts=None, completions=[...], **dataset_columns)`, and returns one
float (or `None` = "could not be scored") per completion. `reward.score(...)` returns the same values as
`Score` objects that also carry the extracted answer and a short reason, which the engine uses as a critique.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tfgrpo.rewards.errors import RewardError


@dataclass(frozen=True)
class Score:
    """One completion's reward. `value=None` means the completion could not be scored (never silently 0)."""

    value: float | None
    extracted: str | None
    reason: str


def completion_text(completion: Any) -> str:
    """The text of a completion: a string, or a conversational list of messages (last assistant turn)."""
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return _content_text(completion.get("content"))
    if isinstance(completion, Sequence):
        messages = [m for m in completion if isinstance(m, dict)]
        assistant = [m for m in messages if m.get("role", "assistant") == "assistant"]
        chosen = assistant or messages
        return _content_text(chosen[-1].get("content")) if chosen else ""
    raise RewardError(f"a completion must be a string or a list of chat messages, got {type(completion).__name__}")


def _content_text(content: Any) -> str:
    # Content can be a plain string or a list of typed parts ({"type": "text", "text": ...}).
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


def column(columns: dict[str, Any], key: str, n: int, *, reward_name: str) -> list[Any]:
    """The dataset column `key`, one value per completion; a clear error when it is missing or misaligned."""
    if key not in columns or columns[key] is None:
        present = sorted(k for k in columns if k not in _TRL_EXTRAS)
        raise RewardError(f"reward '{reward_name}' needs the dataset column '{key}' (columns given: {present})")
    values = columns[key]
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        values = [values] * n  # one value for the whole batch
    if len(values) != n:
        raise RewardError(f"reward '{reward_name}': column '{key}' has {len(values)} values for {n} completions")
    return list(values)


# Keyword arguments TRL passes next to the dataset columns; never dataset columns themselves.
_TRL_EXTRAS = frozenset({"prompts", "completion_ids", "trainer_state", "log_extra", "log_metric", "environments"})


class Reward:
    """Base class: subclasses implement `score`; `__call__` is the TRL reward-function signature."""

    name: str = "reward"

    def __init__(self) -> None:
        # TRL names a reward function by its `__name__` in logs; instances don't get one by default.
        self.__name__ = self.name

    def score(self, completions: Sequence[Any], prompts: Sequence[Any] | None = None, **columns: Any) -> list[Score]:
        raise NotImplementedError

    def __call__(
        self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] | None = None, **columns: Any
    ) -> list[float | None]:
        if completions is None:
            raise RewardError(f"reward '{self.name}' was called without completions")
        return [s.value for s in self.score(completions, prompts=prompts, **columns)]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


__all__ = ["Reward", "Score", "column", "completion_text"]
