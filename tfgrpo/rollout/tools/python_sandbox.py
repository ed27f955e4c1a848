"""A sandboxed Python interpreter tool: each trajectory gets its own locked-down worker process.

Isolation levels, strongest first (probed once per tool and reported by `describe()`;
docs/security.md has the threat model):

- **bubblewrap** (`bwrap`, see `tfgrpo.rewards.isolation`): its own PID, network, IPC and UTS namespaces and
  its own `/proc`; a read-only view of only `/usr` and the interpreter's trees; one private writable
  working directory; no home, run directory, project code or other process visible. Under it the
  layers below still apply (private uid, rlimits, wall-clock kill, audit hook).
- **namespace** fallback (`unshare`, only where bwrap is missing or refused; logged as a warning):
  the host's `/proc` and file system stay readable, so secrets in other processes' command lines or
  in readable files are NOT protected;
- **process** fallback: no kernel isolation at all (logged as a warning).

The layers:

- **network namespace** (`unshare --net`, as root or via an unprivileged user namespace): the worker
  has no network interface but a downed loopback, so even 127.0.0.1 is unreachable;
- **PID namespace** (`unshare --pid --fork --kill-child`): killing the worker kills every process it
  spawned, including ones that left the process group;
- **private uid** (only when started as root): the worker runs as a random unused uid, so the kernel
  refuses writes to anything it does not own and RLIMIT_NPROC caps its processes;
- **rlimits**: address space (memory), CPU seconds, file size, open files;
- **disk quota** (`max_disk_mb`): the work dir is a size-capped tmpfs, and under bubblewrap nothing else
  is writable (`process` level: the per-file limit only);
- **leftovers stopped**: threads and processes a cell started end with it; folders of dead runs are
  removed on the next start (`tfgrpo.rewards.sandbox_folders`);
- **wall-clock kill**: the parent kills the whole process group when a cell overruns;
- **audit hook** inside the worker (always): refuses sockets, process creation, ctypes symbol lookup and
  writes outside the working directory. This is the only network/write guard where namespaces and
  root are unavailable; it stops careless code, not a determined attacker.

A timeout or memory error inside a cell is raised in the user's code (state survives); a hard kill
(wall clock + grace, CPU hard limit, crash) restarts the worker on the next call and says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tfgrpo.core.config import format_validation_error
from tfgrpo.rewards.isolation import MAX_PROCESSES, bwrap_command
from tfgrpo.rewards.sandbox_folders import SandboxFolder, remove_stale_folders
from tfgrpo.rollout.tools.base import Tool, ToolError, ToolResult
from tfgrpo.rollout.tools.sandbox_isolation import Isolation, probe_isolation
from tfgrpo.rollout.tools.sandbox_output import OutputCapture

WORKER_SCRIPT = Path(__file__).with_name("_sandbox_worker.py")
#: where the worker script appears inside a bubblewrap sandbox (no other project file is visible)
WORKER_INSIDE = "/opt/tfgrpo/sandbox_worker.py"
#: extra wall time the worker gets to report its own timeout before the parent kills it
KILL_GRACE_S = 1.5
STARTUP_TIMEOUT_S = 20.0
#: the configuration the worker applies itself (rlimits, the size of the quota tmpfs it may mount)
WORKER_LIMITS = set("memory_mb cpu_s session_cpu_s max_file_mb max_disk_mb max_open_files max_processes".split())


class PythonSandboxConfig(BaseModel):
    """Limits and isolation of the `python` tool."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    timeout_s: float = Field(10.0, gt=0, description="Wall-clock seconds per call.")
    cpu_s: float = Field(10.0, gt=0, description="CPU seconds per call (RLIMIT_CPU soft limit).")
    session_cpu_s: float = Field(600.0, gt=0, description="CPU seconds for a whole trajectory (hard limit).")
    memory_mb: int = Field(2048, ge=64, description="Address-space limit of the worker (RLIMIT_AS), MiB.")
    max_output_chars: int = Field(4000, ge=100, description="Output kept per call (head and tail).")
    max_file_mb: int = Field(64, ge=1, description="Largest file the code may write (RLIMIT_FSIZE), MiB.")
    max_disk_mb: int = Field(
        256,
        ge=1,
        description="All the code may write, MiB: its work dir is a tmpfs of this size (held in RAM) under "
        "bubblewrap and namespace isolation; process isolation has no total cap, only max_file_mb.",
    )
    max_open_files: int = Field(256, ge=16, description="RLIMIT_NOFILE of the worker.")
    max_processes: int = Field(
        MAX_PROCESSES, ge=1, description="RLIMIT_NPROC of the private uid (root only); the code reward's cap too."
    )
    persistent: bool = Field(True, description="Keep variables between the calls of one trajectory.")
    isolation: Literal["auto", "bubblewrap", "namespace", "process"] = Field(
        "auto",
        description="bubblewrap: require bwrap (own /proc, read-only Python view, private workdir); "
        "namespace: require unshare --net/--pid (host /proc and files stay readable); process: plain "
        "process + audit hook; auto: the strongest available, with a warning when it is not bubblewrap.",
    )
    block_processes: bool = Field(True, description="Refuse fork/exec/subprocess in the audit hook.")
    python: str | None = Field(None, description="Interpreter for the worker; None = the current one.")

    @model_validator(mode="after")
    def _file_fits_on_disk(self) -> PythonSandboxConfig:
        if self.max_file_mb > self.max_disk_mb:
            raise ValueError(
                f"max_file_mb ({self.max_file_mb}) is larger than max_disk_mb ({self.max_disk_mb}): "
                "raise max_disk_mb or lower max_file_mb"
            )
        return self


class PythonSession:
    """One worker process and its working directory; calls run one at a time, sharing variables."""

    def __init__(self, config: PythonSandboxConfig, isolation: Isolation):
        self.config = config
        self.isolation = isolation
        self.session_id = secrets.token_hex(8)
        self._proc: asyncio.subprocess.Process | None = None
        self._folder: SandboxFolder | None = None
        self._pump: asyncio.Task | None = None
        self._capture = OutputCapture(config.max_output_chars)
        self._lock = asyncio.Lock()
        self._lost_state = False

    @property
    def workdir(self) -> str | None:
        return self._folder.path if self._folder else None

    async def execute(self, code: str) -> ToolResult:
        async with self._lock:
            started = time.monotonic()
            notice = ""
            if self._proc is None or self._proc.returncode is not None:
                if self._lost_state:
                    notice = (
                        "[note: the interpreter was restarted after the previous failure; earlier variables "
                        "(and, with a disk quota, files) are gone]\n"
                    )
                    self._lost_state = False
                startup_error = await self._start()
                if startup_error:
                    return ToolResult(error=startup_error, elapsed_s=time.monotonic() - started)
            output, truncated, error = await self._run_cell(code)
            return ToolResult(
                output=notice + output, error=error, truncated=truncated, elapsed_s=time.monotonic() - started
            )

    async def _start(self) -> str | None:
        """Start the worker in a private work directory; returns why it did not come up, or None."""
        workdir, uid = await asyncio.to_thread(self._prepare_workdir)
        command, python = self._worker_command(workdir, uid)
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self._worker_env(workdir),
                cwd=workdir,
                start_new_session=True,
            )
        except OSError as exc:  # a wrong `python` path: the user's configuration, not the model's code
            raise ToolError(f"python tool: cannot start the interpreter {python!r}: {exc}") from None
        self._capture.begin("")
        self._pump = asyncio.create_task(self._pump_output(self._proc))
        try:
            line = await asyncio.wait_for(self._proc.stdout.readline(), STARTUP_TIMEOUT_S)
        except asyncio.TimeoutError:
            line = b""
        if line.strip() == b'{"ready": true}':
            return None
        await self._kill()
        output, _ = self._capture.text()
        return f"the Python sandbox failed to start: {output.strip()[-1000:] or 'no output'}"

    def _prepare_workdir(self) -> tuple[str, int | None]:
        """(the session's work directory, claimed on the host; a fresh private uid where isolation gives one).

        With a disk quota the sandbox sees its own tmpfs at that path, so the host folder stays ours;
        without, the code writes into it, so it belongs to the private uid."""
        if self._folder is None:
            self._folder = SandboxFolder()
        uid = None
        if self.isolation.private_uid:
            uid = 1_000_000 + secrets.randbelow(1_000_000_000)  # unused and private: no shared NPROC count
            if not self.isolation.disk_quota:
                os.chown(self._folder.path, uid, uid)
        return self._folder.path, uid

    def _worker_command(self, workdir: str, uid: int | None) -> tuple[list[str], str]:
        """(the command line that starts the worker inside the isolation, the interpreter it runs)."""
        worker_config = {
            "session": self.session_id,
            "workdir": workdir,
            "uid": uid,
            # under bubblewrap every parent directory is traversable: the uid needs no extra capability
            "keep_read_access": uid is not None and not self.isolation.bubblewrap,
            "block_network": True,
            "block_processes": self.config.block_processes,
            "kill_all_is_own": self.isolation.kill_all_is_own,
            # bubblewrap mounts the quota tmpfs itself; in a mount namespace the worker does
            "mount_quota_tmpfs": self.isolation.disk_quota and not self.isolation.bubblewrap,
            **self.config.model_dump(include=WORKER_LIMITS),
        }
        python = self.config.python or sys.executable
        if self.isolation.bubblewrap:
            prefix = bwrap_command(
                python,
                workdir=workdir,
                read_only={str(WORKER_SCRIPT): WORKER_INSIDE},
                user_namespace=not self.isolation.private_uid,
                disk_quota_bytes=self.config.max_disk_mb * 1024 * 1024 if self.isolation.disk_quota else None,
            )
            worker = WORKER_INSIDE
        else:
            prefix, worker = self.isolation.unshare_prefix, str(WORKER_SCRIPT)
        return [*prefix, python, "-I", "-B", worker, json.dumps(worker_config)], python

    def _worker_env(self, workdir: str) -> dict[str, str]:
        """A minimal environment: no variable of ours (secrets included) reaches the sandbox. HOME and
        TMPDIR are the work dir: caches and temporary files count against the disk quota."""
        return {
            "PATH": os.defpath,
            "HOME": workdir,
            "TMPDIR": workdir,
            "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "MPLBACKEND": "Agg",
        }

    async def _pump_output(self, proc: asyncio.subprocess.Process) -> None:
        while chunk := await proc.stderr.read(65536):
            self._capture.feed(chunk)
        self._capture.flush()

    async def _run_cell(self, code: str) -> tuple[str, bool, str | None]:
        proc = self._proc
        sentinel = f"\x00tfgrpo-end-{secrets.token_hex(8)}\x00"
        self._capture.begin(sentinel)
        request = {"code": code, "nonce": sentinel, "timeout_s": self.config.timeout_s, "cpu_s": self.config.cpu_s}
        error: str | None = None
        try:
            proc.stdin.write((json.dumps(request) + "\n").encode("utf-8"))
            await proc.stdin.drain()
            line = await asyncio.wait_for(proc.stdout.readline(), self.config.timeout_s + KILL_GRACE_S)
        except asyncio.TimeoutError:
            await self._kill()
            error = (
                f"execution timed out after {self.config.timeout_s:g} s and did not stop; the interpreter was killed"
            )
        except (BrokenPipeError, ConnectionResetError):
            line = b""
        else:
            if line:
                reply = json.loads(line)
                error = reply["error"]
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._capture.done.wait(), KILL_GRACE_S)
                if reply.get("restart"):  # a thread of the cell would not stop: only killing the worker does
                    await self._kill()
                    error = (
                        f"{error or 'a thread did not stop'}; the interpreter was killed to stop it (variables lost)"
                    )
        if error is None and not line:
            error = await self._describe_death()
        output, truncated = self._capture.text()
        return output, truncated, error

    async def _describe_death(self) -> str:
        """The worker exited mid-cell: say why in words the model can act on."""
        try:
            returncode = await asyncio.wait_for(self._proc.wait(), KILL_GRACE_S)
        except asyncio.TimeoutError:
            returncode = None
        await self._kill()
        if returncode is not None and returncode < 0:
            name = signal.Signals(-returncode).name
            reason = {
                "SIGKILL": "killed (CPU time or memory limit)",
                "SIGXCPU": "CPU time limit exceeded",
                "SIGSEGV": "crashed (segmentation fault)",
            }.get(name, f"killed by {name}")
        elif returncode is not None and returncode > 128:  # unshare reports a child's signal as 128+N
            reason = f"killed by {signal.Signals(returncode - 128).name}"
        else:
            reason = f"exited with status {returncode}"
        return f"the interpreter {reason}; its variables are lost"

    async def _kill(self) -> None:
        proc = self._proc
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        if self._pump is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._pump, KILL_GRACE_S)
        self._lost_state = True

    async def aclose(self) -> None:
        proc = self._proc
        if proc is not None and proc.returncode is None:
            proc.stdin.close()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(proc.wait(), 1.0)
        if proc is not None:
            await self._kill()
        self._proc = None
        if self._folder is not None:
            await asyncio.to_thread(self._folder.release)
            self._folder = None


class PythonTool(Tool):
    """Run Python code in a sandbox and return what it printed."""

    name: ClassVar[str] = "python"
    description: ClassVar[str] = (
        "Execute Python 3 code in a sandboxed interpreter and return what it prints (and the value of a final "
        "expression). Variables persist between calls of this conversation. No network access; files may only "
        "be written in the current directory. Use print() to see results."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"code": {"type": "string", "description": "The Python code to run."}},
        "required": ["code"],
    }

    def __init__(self, config: PythonSandboxConfig | None = None, **overrides: Any):
        base = config or PythonSandboxConfig()
        try:
            self.config = PythonSandboxConfig.model_validate({**base.model_dump(), **overrides})
        except ValidationError as exc:
            raise ToolError(f"python tool: {format_validation_error(exc, source='options')}") from None
        self._isolation: Isolation | None = None
        self._swept = False

    def isolation(self) -> Isolation:
        if self._isolation is None:
            self._isolation = probe_isolation(self.config.isolation, self.config.python)
        return self._isolation

    def describe(self) -> str:
        return self.isolation().describe()

    async def run(self, arguments: dict[str, Any]) -> ToolResult:
        """One call in a fresh interpreter (no state kept); `session()` keeps state instead."""
        async with self._open() as session:
            return await _execute(session, arguments)

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[Tool]:
        if not self.config.persistent:
            yield self
            return
        async with self._open() as session:
            yield _PythonSessionTool(session)

    @contextlib.asynccontextmanager
    async def _open(self) -> AsyncIterator[PythonSession]:
        isolation = await asyncio.to_thread(self.isolation)
        if not self._swept:  # the first session of this run: folders of runs that died go now
            self._swept = True
            await asyncio.to_thread(remove_stale_folders)
        session = PythonSession(self.config, isolation)
        try:
            yield session
        finally:
            await session.aclose()


class _PythonSessionTool(PythonTool):
    """The `python` tool bound to one trajectory's interpreter."""

    def __init__(self, session: PythonSession):
        self.config = session.config
        self._isolation = session.isolation
        self._session = session

    async def run(self, arguments: dict[str, Any]) -> ToolResult:
        return await _execute(self._session, arguments)

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[Tool]:
        yield self


async def _execute(session: PythonSession, arguments: dict[str, Any]) -> ToolResult:
    code = arguments.get("code")
    if not isinstance(code, str):
        return ToolResult(error="the python tool needs a string argument 'code' with the program to run")
    return await session.execute(code)
