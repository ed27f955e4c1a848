"""Which exceptions are the user's to fix (bad file, bad option, unreachable server) and print as one line."""

from __future__ import annotations

import errno


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


def os_error_line(exc: OSError) -> str:
    """An OSError the command did not expect (`--out` on a read-only mount, a disk that fills mid-run) as one
    line. Every file a command writes is written whole or not at all (tfgrpo.core.atomic), so what was
    saved before stays consistent: a learn run continues from its last completed step with --resume."""
    where = f"{exc.filename}: " if exc.filename else ""
    reason = exc.strerror or str(exc) or type(exc).__name__
    if exc.errno == errno.ENOSPC:
        return f"{where}{reason}: free some space and run the command again (a learn run goes on with --resume)"
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return f"{where}{reason}: the folder cannot be written here; choose another path (--out)"
    return f"{where}{reason}"
