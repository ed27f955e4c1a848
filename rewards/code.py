"""Code reward: run the completion's program against given tests; the verdict comes from a process the
program cannot reach (`tfgrpo.rewards.code_sandbox`).

The program runs in a fresh `python -I` process, in an empty temporary directory, with limits on
wall time, CPU time, address space, file size and processes, in its own session (so a fork bomb's
children die with it); the tests run in a second process that calls the program's functions over a pipe
and gets plain values back. With `sandbox="auto"` (default) or `"bubblewrap"` it runs under bubblewrap (`tfgrpo.rewards.isolation`):
its own /proc and PID namespace, no network, a read-only view of only Python, no home or run directory,
and a total disk cap (`max_disk_mb`: its work dir is a tmpfs of that size, nothing else writable; bwrap
>= 0.7, probed). `sandbox="process"` (or auto where bwrap is missing, with a warning) is a plain process:
16 MiB per file and no total cap; it contains mistakes of an honest policy, not hostile code. The first
batch of a reward removes the folders of runs that died (`tfgrpo.rewards.sandbox_folders`). docs/security.md has
the threat model.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tfgrpo.rewards.base import Reward, Score, column, completion_text
from tfgrpo.rewards.code_sandbox import MAX_DISK_MB, run_tests
from tfgrpo.rewards.errors import RewardError
from tfgrpo.rewards.isolation import probe_bubblewrap
from tfgrpo.rewards.params import choice, count, flag, number, optional_count
from tfgrpo.rewards.sandbox_folders import CODE_FOLDER_PREFIX, remove_stale_folders

logger = logging.getLogger(__name__)

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.DOTALL)
SANDBOXES = ("auto", "bubblewrap", "process")


def resolve_sandbox(sandbox: str) -> str:
    """ "bubblewrap" or "process": what `sandbox` means on this machine (auto falls back loudly)."""
    if sandbox not in SANDBOXES:
        raise RewardError(f"code reward: sandbox must be one of {', '.join(SANDBOXES)} (got {sandbox!r})")
    if sandbox == "process":
        return sandbox
    reason = probe_bubblewrap(sys.executable, os.geteuid() != 0)
    if reason is None:
        return "bubblewrap"
    if sandbox == "bubblewrap":
        raise RewardError(f"code reward: sandbox 'bubblewrap' is unavailable: {reason}")
    logger.warning(
        "code reward: bubblewrap unavailable (%s); FALLING BACK to a plain process: candidate code "
        "can read the host's files and processes (see docs/security.md)",
        reason,
    )
    return "process"


def resolve_disk_quota(sandbox: str, max_disk_mb: int) -> int | None:
    """`max_disk_mb` where `sandbox` (resolved) can enforce it, else None with a warning (bwrap < 0.7)."""
    if sandbox != "bubblewrap":
        return None
    reason = probe_bubblewrap(sys.executable, os.geteuid() != 0, disk_quota=True)
    if reason is None:
        return max_disk_mb
    logger.warning(
        "code reward: bwrap gives no disk quota here (%s); max_disk_mb is not enforced, only 16 MiB per file",
        reason,
    )
    return None


def extract_code(text: str) -> str:
    """The last fenced code block (python or unlabelled), else the whole completion."""
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(text)]
    python = [body for lang, body in blocks if lang in ("", "python", "py", "python3")]
    if python:
        return python[-1]
    return blocks[-1][1] if blocks else text


class CodeReward(Reward):
    """Fraction of the row's tests the completion's code passes (or 1/0 with `all_or_nothing`).

    Args:
        tests_key: column with the tests: a list of Python snippets (asserts), or one string of them.
        timeout_s: wall-clock limit per candidate (CPU time is limited too).
        memory_mb: address-space limit per candidate.
        workers: candidates run at once (threads waiting on subprocesses).
        sandbox: "auto" (bubblewrap when it works here, else a plain process with a warning),
            "bubblewrap" (required), or "process".
        max_disk_mb: all a candidate may write under bubblewrap (a tmpfs in RAM: `workers` candidates may
            hold that much each); a plain process has only the 16 MiB per-file limit.
    """

    name = "code"

    def __init__(
        self,
        tests_key: str = "tests",
        *,
        timeout_s: float = 5.0,
        memory_mb: int = 512,
        all_or_nothing: bool = False,
        workers: int | None = None,
        sandbox: str = "auto",
        max_disk_mb: int = MAX_DISK_MB,
    ) -> None:
        super().__init__()
        self.tests_key = tests_key
        self.timeout_s = number(self.name, "timeout_s", timeout_s)
        self.memory_mb = count(self.name, "memory_mb", memory_mb)
        self.all_or_nothing = flag(self.name, "all_or_nothing", all_or_nothing)
        self.workers = optional_count(self.name, "workers", workers) or max(1, min(os.cpu_count() or 1, 8))
        self.sandbox = choice(self.name, "sandbox", sandbox, SANDBOXES)  # bubblewrap is probed on first use
        self.max_disk_mb = count(self.name, "max_disk_mb", max_disk_mb)
        self._resolved_sandbox: str | None = None
        self._disk_quota_mb: int | None = None

    def score(self, completions: Sequence[Any], prompts: Sequence[Any] | None = None, **columns: Any) -> list[Score]:
        tests_per_row = column(columns, self.tests_key, len(completions), reward_name=self.name)
        if self._resolved_sandbox is None:  # the first batch: folders of runs that died go now
            remove_stale_folders(prefix=CODE_FOLDER_PREFIX)
            self._resolved_sandbox = resolve_sandbox(self.sandbox)
            self._disk_quota_mb = resolve_disk_quota(self._resolved_sandbox, self.max_disk_mb)
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            return list(pool.map(self._one, completions, tests_per_row))

    def _one(self, completion: Any, tests: Any) -> Score:
        if isinstance(tests, str):
            tests = [tests]
        if not tests:
            return Score(None, None, f"no tests in column '{self.tests_key}'")
        code = extract_code(completion_text(completion))
        if not code.strip():
            return Score(0.0, None, "no code found")
        passed, failures = run_tests(
            code,
            [str(t) for t in tests],
            timeout_s=self.timeout_s,
            memory_mb=self.memory_mb,
            sandbox=self._resolved_sandbox or "process",
            max_disk_mb=self._disk_quota_mb,
        )
        fraction = min(passed, len(tests)) / len(tests)  # in [0, 1] by construction; kept so by the bound
        value = float(passed == len(tests)) if self.all_or_nothing else fraction
        reason = f"passed {passed}/{len(tests)} tests"
        if failures:
            reason += f"; first failure: {failures[0][:160]}"
        return Score(value, code, reason)


__all__ = ["CodeReward", "extract_code", "resolve_disk_quota", "resolve_sandbox", "run_tests"]  # run_tests re-exported
