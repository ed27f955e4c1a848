"""The processes behind `tfgrpo.rewards.verifier.Verifier`: a zygote that has imported sympy, and the workers it forks.

The zygote is `python -m tfgrpo.rewards._verify_worker`; asked over a control socket, it forks a worker in ~10 ms
and passes back its pid, and the worker talks to the pool over its own connection. A worker past its
deadline is killed with SIGKILL (the zygote reaps it). POSIX only (fork, SCM_RIGHTS).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from multiprocessing.connection import Connection
from typing import Any

from tfgrpo.rewards.errors import RewardError

_WORKER_MODULE = "tfgrpo.rewards._verify_worker"
READY = "ready"  # the worker's first message, once sympy is imported
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_STARTUP_TIMEOUT_S = 120.0  # a cold worker imports sympy; generous, and counted apart from task deadlines


class Zygote:
    """The `python -m tfgrpo.rewards._verify_worker` process that forks workers on request (see that module)."""

    def __init__(self, memory_limit_bytes: int | None) -> None:
        # A stream socket: when this side closes, the zygote reads EOF and exits (a datagram pair would not).
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", _WORKER_MODULE, str(theirs.fileno()), str(memory_limit_bytes or 0)],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONPATH": _python_path()},
            )
        except OSError as exc:
            ours.close()
            raise RewardError(f"could not start the math-verify worker process: {exc}") from exc
        finally:
            theirs.close()
        self.control = ours
        self.control.settimeout(_STARTUP_TIMEOUT_S)
        try:
            ready = self._recv_exactly(len(READY)).decode()
        except OSError:
            ready = ""
        if ready != READY:
            self.close()
            raise RewardError(f"the math-verify worker process did not start (exit code {self.process.poll()})")

    def fork_worker(self) -> tuple[int, Connection]:
        ours, theirs = socket.socketpair()
        try:
            socket.send_fds(self.control, [b"f"], [theirs.fileno()])
            pid = int.from_bytes(self._recv_exactly(8), "big")
        except (OSError, ValueError) as exc:
            ours.close()
            raise RewardError(f"the math-verify worker process stopped answering: {exc}") from exc
        finally:
            theirs.close()
        return pid, Connection(ours.detach())

    def _recv_exactly(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.control.recv(size - len(data))
            if not chunk:
                raise OSError("connection closed")
            data += chunk
        return data

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        self.control.close()  # the zygote sees EOF, kills its workers and exits
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class WorkerProcess:
    """One forked worker: its pid and its connection. Starting does not wait for it to be ready."""

    def __init__(self, zygote: Zygote) -> None:
        self.pid, self.conn = zygote.fork_worker()
        self.ready = False

    def wait_ready(self) -> None:
        """Block until the worker has said it is ready (never charged to a task's deadline)."""
        if self.ready:
            return
        try:
            if self.conn.poll(_STARTUP_TIMEOUT_S) and self.conn.recv() == READY:
                self.ready = True
                return
        except (EOFError, OSError):
            pass
        self.kill()
        raise RewardError("a math-verify worker did not start")

    def cpu_seconds(self) -> float | None:
        """User + system CPU time of the worker so far (Linux /proc), or None where unavailable."""
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS

    def send(self, message: Any) -> None:
        self.conn.send(message)

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        return not self.conn.closed

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)  # the zygote reaps it
        except ProcessLookupError:
            pass
        self.conn.close()


def _python_path() -> str:
    # The zygote must import this very `rewards` package, even when it is not installed (a source checkout).
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    existing = os.environ.get("PYTHONPATH")
    return package_root + (os.pathsep + existing if existing else "")


__all__ = ["READY", "WorkerProcess", "Zygote"]
