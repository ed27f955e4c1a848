"""Verifiable rewards shared by the Training-Free GRPO engine, the evals and the fine-tuning baselines.

Every reward is a plain callable usable unchanged as a TRL `GRPOTrainer` reward function,
`reward(prompts=None, completions=[...], **dataset_columns) -> list[float | None]`, and has
`reward.score(...) -> list[Score]` with the extracted answer and a short reason.

    from rewards import get_reward, combine
    math = get_reward("math")
    math(completions=["... \\boxed{73}"], answer=["073"])   # [1.0]

Importing this package is cheap: sympy / math-verify load only inside the verifier worker processes.
"""

from rewards.base import Reward, Score, completion_text
from rewards.choice import ChoiceReward
from rewards.code import CodeReward
from rewards.errors import RewardError
from rewards.exact import ExactMatchReward
from rewards.extraction import extract_answer
from rewards.format import FormatReward
from rewards.judge import JudgeReward
from rewards.majority import MajorityReward, majority_vote
from rewards.math import MathReward, is_equivalent
from rewards.numeric import NumericReward
from rewards.registry import REWARD_NAMES, CombinedReward, combine, get_reward
from rewards.verifier import Verifier

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
    "majority_vote",
]
