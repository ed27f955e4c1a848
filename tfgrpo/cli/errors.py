"""Which exceptions are the user's to fix (bad file, bad option, unreachable server) and print as one line."""

from __future__ import annotations


def user_facing_errors() -> tuple[type[BaseException], ...]:
    from tfgrpo.core.atomic import LockTimeoutError
    from tfgrpo.core.config import ConfigError
    from tfgrpo.core.errors import EvalError
    from tfgrpo.experiences.errors import ExperienceError
    from tfgrpo.finetune.errors import FinetuneError
    from tfgrpo.llm.errors import LLMError
    from tfgrpo.rewards.errors import RewardError
    from tfgrpo.rollout.tools.base import ToolError

    return (
        ConfigError,
        LLMError,
        ExperienceError,
        RewardError,
        EvalError,
        FinetuneError,
        LockTimeoutError,
        FileNotFoundError,
        ToolError,
    )
