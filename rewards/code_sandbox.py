"""Run a completion's program against a row's tests in two sandboxed processes; read the verdict from the one
the program cannot reach.

- the **candidate** process (`_code_candidate.py`) loads the program and answers calls with plain values;
- the **harness** process (`_code_harness.py`) runs the tests, calling the program through a pipe pair,
  and writes one verdict line per test, with a per-run nonce, to the stdout only this module reads.

Under bubblewrap each runs in a sandbox of its own (own PID namespace: neither sees the other); the
candidate has a private working directory, RLIMIT_NPROC (`max_processes`) and, when we are root, a
private uid. Its disk: a file-size limit of 16 MiB per file everywhere, and under bubblewrap a total cap
(`max_disk_mb`): its work dir is a tmpfs of that size and nothing else is writable, so the host folder
stays empty; a plain process writes into the host folder with the per-file limit only. Both folders are
`tfgrpo.rewards.sandbox_folders` claims: a killed run's are removed by the next run's first batch. As a plain process (`sandbox="process"`), the harness turns off its dumpable flag so a
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
from collections.abc import Sequence
from pathlib import Path

from tfgrpo.rewards.isolation import MAX_PROCESSES, bwrap_command
from tfgrpo.rewards.sandbox_folders import CODE_FOLDER_PREFIX, SandboxFolder

_HERE = Path(__file__).parent
_SCRIPTS = {name: _HERE / name for name in ("_code_harness.py", "_code_candidate.py", "_code_wire.py")}
_INSIDE = "/opt/tfgrpo"
#: all the candidate may write under bubblewrap, MiB (its work dir's tmpfs, held in RAM)
MAX_DISK_MB = 64
HARNESS_FOLDER_PREFIX = CODE_FOLDER_PREFIX + "tests-"


def _read_only_scripts() -> dict[str, str]:
    return {str(path): f"{_INSIDE}/{name}" for name, path in _SCRIPTS.items()}


def _python_script(name: str, sandbox: str) -> list[str]:
    """Our interpreter running one of the scripts, at the path it has where it runs."""
    return [sys.executable, "-I", f"{_INSIDE}/{name}" if sandbox == "bubblewrap" else str(_SCRIPTS[name])]


def _private_uid(sandbox: str) -> int | None:
    """A fresh uid for the candidate when we are root under bubblewrap (RLIMIT_NPROC then counts only its
    processes; root is exempt from it). A plain process keeps our uid: the interpreter may live where only
    we can read it."""
    return 1_000_000 + secrets.randbelow(1_000_000_000) if os.geteuid() == 0 and sandbox == "bubblewrap" else None


def _spawn(command: list[str], cwd: str, fds: tuple[int, ...], stdin: int, stdout: int, stderr: int):
    # HOME and TMPDIR are the work dir: caches and temporary files count against its cap, and go with it
    env = {"PATH": os.environ.get("PATH", os.defpath), "LANG": "C.UTF-8", "HOME": cwd, "TMPDIR": cwd}
    return subprocess.Popen(
        command,
        cwd=cwd,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        pass_fds=fds,
        env=env,
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
    code: str,
    tests: Sequence[str],
    *,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    sandbox: str = "process",
    max_disk_mb: int | None = MAX_DISK_MB,
) -> tuple[int, list[str]]:
    """(tests passed, failure lines) of `code` against `tests` (each a Python snippet, e.g. an assert).

    `sandbox`: "bubblewrap" or "process" (see `tfgrpo.rewards.code.resolve_sandbox`). `max_disk_mb`: under
    bubblewrap, all the program may write (a tmpfs; needs bwrap >= 0.7, see `tfgrpo.rewards.code`); None binds the
    host folder instead, with the per-file limit only, as a plain process always has."""
    quota_bytes = max_disk_mb * 1024 * 1024 if max_disk_mb is not None and sandbox == "bubblewrap" else None
    nonce = secrets.token_hex(16)
    with (
        SandboxFolder(prefix=CODE_FOLDER_PREFIX) as candidate_folder,
        SandboxFolder(prefix=HARNESS_FOLDER_PREFIX) as harness_folder,
    ):
        candidate_dir, harness_dir = candidate_folder.path, harness_folder.path
        solution = Path(candidate_dir) / "solution.py"
        solution.write_text(code, encoding="utf-8")
        uid = _private_uid(sandbox)
        if uid is not None:
            os.chmod(solution, 0o644)
            if quota_bytes is None:  # the program writes into the host folder itself
                os.chown(candidate_dir, uid, uid)
        request_read, request_write = os.pipe()
        reply_read, reply_write = os.pipe()
        cpu_seconds = str(max(1, int(timeout_s + 0.999)))
        candidate_command = [
            *_prefix(sandbox, candidate_dir, user_namespace=uid is None, chdir=False, quota_bytes=quota_bytes),
            *_python_script("_code_candidate.py", sandbox),
            *(str(solution), str(request_read), str(reply_write), str(memory_mb * 1024 * 1024), cpu_seconds),
            # RLIMIT_NPROC counts every process of the real uid: a cap only where that uid is the sandbox's own
            str(MAX_PROCESSES if uid is not None or sandbox == "bubblewrap" else 0),
            *([str(uid)] if uid is not None else []),
        ]
        harness_command = [
            *_prefix(sandbox, harness_dir, user_namespace=True, chdir=True),
            *_python_script("_code_harness.py", sandbox),
            *(str(request_write), str(reply_read), str(max(memory_mb, 512) * 1024 * 1024), cpu_seconds),
        ]
        stderr_path = Path(harness_dir) / "candidate-stderr.txt"
        with open(stderr_path, "wb") as candidate_stderr:  # the program's stderr: 16 MiB at most (its file limit)
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
        output, timed_out = _await_verdicts(harness, candidate, nonce, tests, timeout_s)
        stderr_tail = stderr_path.read_bytes()[-2000:].decode("utf-8", errors="replace")
    return _verdict(output, nonce, len(tests), timed_out, timeout_s, candidate, stderr_tail)


def _await_verdicts(
    harness: subprocess.Popen, candidate: subprocess.Popen, nonce: str, tests: Sequence[str], timeout_s: float
) -> tuple[str, bool]:
    """(the harness's output, whether it ran out of time) once it is done; both processes are gone after."""
    timed_out = False
    job = json.dumps({"tests": list(tests), "nonce": nonce}).encode("utf-8")
    try:
        output, _ = harness.communicate(job, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill(harness)
        output, _ = harness.communicate()
    _kill(candidate)
    return output.decode("utf-8", errors="replace"), timed_out


def _prefix(
    sandbox: str, workdir: str, *, user_namespace: bool, chdir: bool, quota_bytes: int | None = None
) -> list[str]:
    """bubblewrap's command prefix (none for a plain process); the candidate enters its 0700 directory itself,
    after it has become the directory's uid. With `quota_bytes` the work dir is a tmpfs of that size, the
    program's file bound read-only into it."""
    if sandbox != "bubblewrap":
        return []
    read_only = _read_only_scripts()
    if quota_bytes is not None:
        solution = str(Path(workdir) / "solution.py")
        read_only[solution] = solution
    command = bwrap_command(
        sys.executable,
        workdir=workdir,
        read_only=read_only,
        user_namespace=user_namespace,
        disk_quota_bytes=quota_bytes,
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


__all__ = ["MAX_DISK_MB", "MAX_PROCESSES", "run_tests"]
