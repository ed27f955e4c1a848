"""Which exceptions are the user's to fix (bad file, bad option, unreachable server) and print as one line."""

from __future__ import annotations


def user_facing_errors() -> tuple[type[BaseException], ...]:
    from experiences.errors import ExperienceError
    from rewards.errors import RewardError
    from tfgrpo.config import ConfigError
    from tfgrpo.llm.errors import LLMError

    errors: list[type[BaseException]] = [ConfigError, LLMError, ExperienceError, RewardError, FileNotFoundError]
    from eval.errors import EvalError
    from finetune.errors import FinetuneError

    errors.extend([EvalError, FinetuneError])
    return tuple(errors)
