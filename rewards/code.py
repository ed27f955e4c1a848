"""Code reward: run the completion's program against given tests in a resource-limited subprocess.

Each candidate runs in a fresh `python -I` process, in an empty temporary directory, with limits on
wall time, CPU time, address space and file size, in its own session (so a fork bomb's children die with
it). With `sandbox="auto"` (default) or `"bubblewrap"` it runs under bubblewrap (`rewards.isolation`):
its own /proc and PID namespace, no network, a read-only view of only Python, no home or run directory.
`sandbox="process"` (or auto where bwrap is missing, with a warning) is a plain process: it contains
mistakes of an honest policy, not hostile code. docs/security.md has the threat model.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rewards.base import Reward, Score, column, completion_text
from rewards.errors import RewardError
from rewards.isolation import bwrap_command, probe_bubblewrap

logger = logging.getLogger(__name__)

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.DOTALL)
_HARNESS = Path(__file__).with_name("_code_harness.py")
_HARNESS_INSIDE = "/opt/tfgrpo/code_harness.py"
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


def extract_code(text: str) -> str:
    """The last fenced code block (python or unlabelled), else the whole completion."""
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(text)]
    python = [body for lang, body in blocks if lang in ("", "python", "py", "python3")]
    if python:
        return python[-1]
    return blocks[-1][1] if blocks else text


def run_tests(
    code: str, tests: Sequence[str], *, timeout_s: float = 5.0, memory_mb: int = 512, sandbox: str = "process"
) -> tuple[int, list[str]]:
    """(tests passed, failure lines) of `code` against `tests` (each a Python snippet, e.g. an assert).

    `sandbox`: "bubblewrap" or "process" (see `resolve_sandbox`)."""
    with tempfile.TemporaryDirectory(prefix="tfgrpo-code-") as workdir:
        root = Path(workdir)
        (root / "solution.py").write_text(code, encoding="utf-8")
        (root / "tests.json").write_text(json.dumps(list(tests)), encoding="utf-8")
        results = root / "results.txt"
        results.touch()
        prefix, harness = [], str(_HARNESS)
        if sandbox == "bubblewrap":
            # a fresh user namespace: uid 65534 inside, no capability outside; workdir is its only writable place
            prefix = bwrap_command(
                sys.executable, workdir=workdir, read_only={str(_HARNESS): _HARNESS_INSIDE}, user_namespace=True
            ) + ["--chdir", workdir]
            harness = _HARNESS_INSIDE
        command = [
            *prefix,
            sys.executable,
            "-I",
            harness,
            "solution.py",
            "tests.json",
            str(results),
            str(memory_mb * 1024 * 1024),
            str(max(1, int(timeout_s + 0.999))),
        ]
        process = subprocess.Popen(
            command,
            cwd=root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={"PATH": os.environ.get("PATH", "")},
            start_new_session=True,
        )
        timed_out = False
        try:
            _, stderr = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(process.pid, signal.SIGKILL)
            _, stderr = process.communicate()
        lines = results.read_text(encoding="utf-8", errors="replace").splitlines()
    passed = sum(1 for line in lines if line == "PASS")
    failures = [line for line in lines if line != "PASS"]
    if timed_out:
        failures.append(f"timed out after {timeout_s:g} s")
    elif process.returncode in (-signal.SIGXCPU, -signal.SIGKILL) and passed + len(failures) < len(tests):
        # the kernel's CPU-time limit fired first (busy code on a machine with idle wall-clock time)
        failures.append(f"timed out after {timeout_s:g} s of CPU time")
    elif process.returncode not in (0, None) and passed + len(failures) < len(tests):
        failures.append(f"exited with code {process.returncode}: {stderr.decode(errors='replace')[-200:].strip()}")
    return passed, failures


class CodeReward(Reward):
    """Fraction of the row's tests the completion's code passes (or 1/0 with `all_or_nothing`).

    Args:
        tests_key: column with the tests: a list of Python snippets (asserts), or one string of them.
        timeout_s: wall-clock limit per candidate (CPU time is limited too).
        memory_mb: address-space limit per candidate.
        workers: candidates run at once (threads waiting on subprocesses).
        sandbox: "auto" (bubblewrap when it works here, else a plain process with a warning),
            "bubblewrap" (required), or "process".
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
    ) -> None:
        super().__init__()
        if timeout_s <= 0 or memory_mb <= 0:
            raise RewardError(f"code reward: timeout_s and memory_mb must be > 0 (got {timeout_s}, {memory_mb})")
        self.tests_key = tests_key
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self.all_or_nothing = all_or_nothing
        self.workers = workers or max(1, min(os.cpu_count() or 1, 8))
        self.sandbox = sandbox
        self._resolved_sandbox: str | None = None

    def score(self, completions: Sequence[Any], prompts: Sequence[Any] | None = None, **columns: Any) -> list[Score]:
        tests_per_row = column(columns, self.tests_key, len(completions), reward_name=self.name)
        if self._resolved_sandbox is None:
            self._resolved_sandbox = resolve_sandbox(self.sandbox)
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
        )
        fraction = passed / len(tests)
        value = float(passed == len(tests)) if self.all_or_nothing else fraction
        reason = f"passed {passed}/{len(tests)} tests"
        if failures:
            reason += f"; first failure: {failures[0][:160]}"
        return Score(value, code, reason)


__all__ = ["CodeReward", "extract_code", "resolve_sandbox", "run_tests"]
