"""Verifiable rewards shared by the Training-Free GRPO engine, the evals and the fine-tuning baselines.

Every reward is a plain callable usable unchanged as a TRL `GRPOTrainer` reward function,
`reward(prompts=None, completions=[...], **dataset_columns) -> list[float | None]`, and has
`reward.score(...) -> list[Score]` with the extracted answer and a short reason.

    from tfgrpo.rewards import get_reward, combine
    math = get_reward("math")
    math(completions=["... \\boxed{73}"], answer=["073"])   # [1.0]

Importing this package is cheap: sympy / math-verify load only inside the verifier worker processes.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tfgrpo.rewards.base import Reward, Score, completion_text
from tfgrpo.rewards.errors import RewardError
from tfgrpo.rewards.registry import REWARD_NAMES, CombinedReward, combine, get_reward

if TYPE_CHECKING:
    from tfgrpo.rewards.choice import ChoiceReward
    from tfgrpo.rewards.code import CodeReward
    from tfgrpo.rewards.exact import ExactMatchReward
    from tfgrpo.rewards.extraction import extract_answer
    from tfgrpo.rewards.format import FormatReward
    from tfgrpo.rewards.judge import JudgeReward
    from tfgrpo.rewards.majority import MajorityReward
    from tfgrpo.rewards.math import MathReward, is_equivalent
    from tfgrpo.rewards.numeric import NumericReward
    from tfgrpo.rewards.verifier import Verifier

#: name -> module: each reward's module loads on first use, so a run that scores with one reward does not
#: import the other seven (the judge's and the code sandbox's modules stay off learn's path to its first request)
_LAZY = {
    "ChoiceReward": "tfgrpo.rewards.choice",
    "CodeReward": "tfgrpo.rewards.code",
    "ExactMatchReward": "tfgrpo.rewards.exact",
    "extract_answer": "tfgrpo.rewards.extraction",
    "FormatReward": "tfgrpo.rewards.format",
    "JudgeReward": "tfgrpo.rewards.judge",
    "MajorityReward": "tfgrpo.rewards.majority",
    "MathReward": "tfgrpo.rewards.math",
    "is_equivalent": "tfgrpo.rewards.math",
    "NumericReward": "tfgrpo.rewards.numeric",
    "Verifier": "tfgrpo.rewards.verifier",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tfgrpo.rewards' has no attribute {name!r}")


__all__ = [
    "REWARD_NAMES",
    "ChoiceReward",
    "CodeReward",
    "CombinedReward",
    "ExactMatchReward",
    "FormatReward",
    "JudgeReward",
    "MajorityReward",
    "MathReward",
    "NumericReward",
    "Reward",
    "RewardError",
    "Score",
    "Verifier",
    "combine",
    "completion_text",
    "extract_answer",
    "get_reward",
    "is_equivalent",
]
