"""Run a completion's program against a row's tests in two sandboxed processes; read the verdict from the one
the program cannot reach.

- the **candidate** process (`_code_candidate.py`) loads the program and answers calls with plain values;
- the **harness** process (`_code_harness.py`) runs the tests, calling the program through a pipe pair,
  and writes one verdict line per test, with a per-run nonce, to the stdout only this module reads.

Under bubblewrap each runs in a sandbox of its own (own PID namespace: neither sees the other); the
candidate has a private working directory, RLIMIT_NPROC (`max_processes`) and, when we are root, a
private uid. As a plain process (`sandbox="process"`), the harness turns off its dumpable flag so a
process of the same uid cannot open its pipes or memory. A verdict line with the wrong nonce or out of
order voids the row (0 tests passed); a harness that dies leaves its remaining tests failed.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from rewards.isolation import bwrap_command

_HERE = Path(__file__).parent
_SCRIPTS = {name: _HERE / name for name in ("_code_harness.py", "_code_candidate.py", "_code_wire.py")}
_INSIDE = "/opt/tfgrpo"
#: processes the candidate may run at once (the python tool's default cap too)
MAX_PROCESSES = 32


def _read_only_scripts() -> dict[str, str]:
    return {str(path): f"{_INSIDE}/{name}" for name, path in _SCRIPTS.items()}


def _script(name: str, sandbox: str) -> str:
    return f"{_INSIDE}/{name}" if sandbox == "bubblewrap" else str(_SCRIPTS[name])


def _private_uid(sandbox: str) -> int | None:
    """A fresh uid for the candidate when we are root under bubblewrap (RLIMIT_NPROC then counts only its
    processes; root is exempt from it). A plain process keeps our uid: the interpreter may live where only
    we can read it."""
    return 1_000_000 + secrets.randbelow(1_000_000_000) if os.geteuid() == 0 and sandbox == "bubblewrap" else None


def _spawn(command: list[str], cwd: str, fds: tuple[int, ...], stdin: int, stdout: int, stderr: int):
    return subprocess.Popen(
        command,
        cwd=cwd,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        pass_fds=fds,
        env={"PATH": os.environ.get("PATH", os.defpath), "LANG": "C.UTF-8"},
        start_new_session=True,
    )


def _kill(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


def _read_verdicts(output: str, nonce: str, count: int) -> tuple[int, list[str]] | None:
    """(passed, failures) from the harness's lines; None when a line is not the harness's own."""
    passed, failures = 0, []
    for expected, line in enumerate(output.splitlines()):
        parts = line.split(" ", 3)
        if expected >= count or len(parts) < 3 or parts[0] != nonce or parts[1] != str(expected):
            return None
        if parts[2] == "PASS" and len(parts) == 3:
            passed += 1
        elif parts[2] == "FAIL":
            failures.append(parts[3] if len(parts) > 3 else "failed")
        else:
            return None
    return passed, failures


def run_tests(
    code: str, tests: Sequence[str], *, timeout_s: float = 5.0, memory_mb: int = 512, sandbox: str = "process"
) -> tuple[int, list[str]]:
    """(tests passed, failure lines) of `code` against `tests` (each a Python snippet, e.g. an assert).

    `sandbox`: "bubblewrap" or "process" (see `rewards.code.resolve_sandbox`)."""
    cpu_seconds = str(max(1, int(timeout_s + 0.999)))
    nonce = secrets.token_hex(16)
    with (
        tempfile.TemporaryDirectory(prefix="tfgrpo-code-") as candidate_dir,
        tempfile.TemporaryDirectory(prefix="tfgrpo-code-tests-") as harness_dir,
    ):
        (Path(candidate_dir) / "solution.py").write_text(code, encoding="utf-8")
        uid = _private_uid(sandbox)
        if uid is not None:
            os.chown(candidate_dir, uid, uid)
            os.chmod(Path(candidate_dir) / "solution.py", 0o644)
        request_read, request_write = os.pipe()
        reply_read, reply_write = os.pipe()
        candidate_command = [
            *_prefix(sandbox, candidate_dir, user_namespace=uid is None, chdir=False),
            sys.executable,
            "-I",
            _script("_code_candidate.py", sandbox),
            str(Path(candidate_dir) / "solution.py"),
            str(request_read),
            str(reply_write),
            str(memory_mb * 1024 * 1024),
            cpu_seconds,
            # RLIMIT_NPROC counts every process of the real uid: a cap only where that uid is the sandbox's own
            str(MAX_PROCESSES if uid is not None or sandbox == "bubblewrap" else 0),
            *([str(uid)] if uid is not None else []),
        ]
        harness_command = [
            *_prefix(sandbox, harness_dir, user_namespace=True, chdir=True),
            sys.executable,
            "-I",
            _script("_code_harness.py", sandbox),
            str(request_write),
            str(reply_read),
            str(max(memory_mb, 512) * 1024 * 1024),
            cpu_seconds,
        ]
        stderr_path = Path(harness_dir) / "candidate-stderr.txt"
        with open(stderr_path, "wb") as candidate_stderr:
            candidate = _spawn(
                candidate_command,
                candidate_dir,
                (request_read, reply_write),
                subprocess.DEVNULL,
                subprocess.DEVNULL,
                candidate_stderr.fileno(),
            )
            harness = _spawn(
                harness_command,
                harness_dir,
                (request_write, reply_read),
                subprocess.PIPE,
                subprocess.PIPE,
                subprocess.DEVNULL,
            )
        for fd in (request_read, request_write, reply_read, reply_write):
            os.close(fd)
        timed_out = False
        job = json.dumps({"tests": list(tests), "nonce": nonce}).encode("utf-8")
        try:
            output, _ = harness.communicate(job, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill(harness)
            output, _ = harness.communicate()
        _kill(candidate)
        stderr_tail = stderr_path.read_bytes()[-2000:].decode("utf-8", errors="replace")
    return _verdict(
        output.decode("utf-8", errors="replace"), nonce, len(tests), timed_out, timeout_s, candidate, stderr_tail
    )


def _prefix(sandbox: str, workdir: str, *, user_namespace: bool, chdir: bool) -> list[str]:
    """bubblewrap's command prefix (none for a plain process); the candidate enters its 0700 directory itself,
    after it has become the directory's uid."""
    if sandbox != "bubblewrap":
        return []
    command = bwrap_command(
        sys.executable, workdir=workdir, read_only=_read_only_scripts(), user_namespace=user_namespace
    )
    return [*command, "--chdir", workdir] if chdir else command


def _verdict(
    output: str,
    nonce: str,
    count: int,
    timed_out: bool,
    timeout_s: float,
    candidate: subprocess.Popen,
    stderr_tail: str,
) -> tuple[int, list[str]]:
    read = _read_verdicts(output, nonce, count)
    if read is None:
        return 0, ["the verdict channel carried a line that is not the harness's: no test is counted"]
    passed, failures = read
    if timed_out:
        failures.insert(0, f"timed out after {timeout_s:g} s")
    elif candidate.returncode == -signal.SIGXCPU:
        failures.insert(0, f"timed out after {timeout_s:g} s of CPU time")
    elif passed + len(failures) < count:
        detail = stderr_tail.strip()[-200:]
        failures.append(f"the test harness stopped early{': ' + detail if detail else ''}")
    return min(passed, count), failures


__all__ = ["MAX_PROCESSES", "run_tests"]
