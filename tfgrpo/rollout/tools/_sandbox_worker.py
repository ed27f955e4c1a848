"""The process inside the Python sandbox: lock itself down, then run the code cells the parent sends.

Run as a script, never imported: `python -I -B _sandbox_worker.py CONFIG_JSON` (it imports nothing of
tfgrpo, so the sandbox starts fast and sees no project code). Order matters:

1. keep private copies of stdin/stdout as the control channel (requests in, JSON replies out), point
   fd 0 at /dev/null and fd 1 at the output pipe (fd 2), so user code can only print;
2. if started as root: drop to the unprivileged uid the parent chose (keeping only CAP_DAC_READ_SEARCH
   so the interpreter can still read its own files when they live under a private home directory);
3. where the parent asks for it (namespace fallback, root of a private mount namespace), cover the
   working directory with a size-capped tmpfs: the disk quota (bubblewrap mounts that one itself);
4. chdir into the working directory and set the resource limits (address space, CPU time,
   file size, open files, process count when the uid is private);
5. install an audit hook (PEP 578) that refuses network sockets, process creation, native symbol
   lookup (ctypes) and any write outside the working directory. Audit hooks cannot be removed from
   Python, but they are a guard against careless code, not a security boundary: the kernel-level
   layers (network namespace, private uid, rlimits, process-group kill) are what hold against malice.

Each request is one line of JSON {"code", "nonce", "timeout_s", "cpu_s"}. The cell runs in one
namespace that persists between requests (a notebook); if the last statement is an expression its
repr is printed. After the cell the worker writes the nonce sentinel to the output pipe (so the parent
knows where this cell's output ends) and one JSON reply line {"error", "kind", "restart"} to the control
channel. Before that it stops what the cell left running: every other thread gets SystemExit raised at
its next Python instruction, every process the cell started is killed; a thread still burning CPU after
that (native code, or a loop that swallows the exception) sets "restart": the parent kills the worker.
"""

from __future__ import annotations

import ast
import ctypes
import json
import linecache
import math
import os
import resource
import signal
import sys
import threading
import time
import traceback

CELL_FILENAME = "<cell>"
PR_SET_KEEPCAPS = 8
CAP_DAC_READ_SEARCH = 2
LINUX_CAPABILITY_VERSION_3 = 0x20080522
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
MS_NOSUID, MS_NODEV = 2, 4
#: how long the threads a cell left get to stop, then how long the ones left are watched for CPU use
THREAD_STOP_S = 0.2
BUSY_SAMPLE_S = 0.2
#: clock ticks (100 a second) in BUSY_SAMPLE_S from which a leftover thread burns CPU (10 %: margin for a busy host)
BUSY_TICKS = 2
REAP_WAIT_S = 0.5


class SandboxTimeout(BaseException):
    """Raised inside user code when the cell's wall time is up (BaseException: `except Exception` won't eat it)."""


class SandboxCPUTimeExceeded(BaseException):
    """Raised inside user code when the cell's CPU-time budget is spent."""


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_privileges(uid: int, keep_read_access: bool) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if keep_read_access and libc.prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_KEEPCAPS) failed")
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise OSError("could not drop to the sandbox uid")
    if keep_read_access:
        data = (_CapData * 2)()
        data[0].effective = data[0].permitted = 1 << CAP_DAC_READ_SEARCH
        if libc.capset(ctypes.byref(_CapHeader(LINUX_CAPABILITY_VERSION_3, 0)), data) != 0:
            raise OSError(ctypes.get_errno(), "capset failed")


def mount_quota_tmpfs(workdir: str, size_mb: int, uid: int | None) -> None:
    """Cover the working directory with a tmpfs of `size_mb` MiB owned by `uid` (only called as root of a
    private mount namespace, so the host never sees the mount)."""
    owner = f",uid={uid},gid={uid}" if uid is not None else ""
    options = f"size={int(size_mb) * 1024 * 1024},mode=0700{owner}".encode()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(b"tmpfs", os.fsencode(workdir), b"tmpfs", MS_NOSUID | MS_NODEV, options) != 0:
        raise OSError(ctypes.get_errno(), f"mounting the disk-quota tmpfs on {workdir} failed")


def set_limits(config: dict) -> None:
    memory = int(config["memory_mb"]) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    session_cpu = int(math.ceil(config["session_cpu_s"]))
    resource.setrlimit(resource.RLIMIT_CPU, (min(session_cpu, int(math.ceil(config["cpu_s"]))), session_cpu))
    file_bytes = int(config["max_file_mb"]) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    nofile = int(config["max_open_files"])
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    if config.get("uid") is not None:
        # RLIMIT_NPROC counts every process of the real uid; only meaningful with a private uid.
        resource.setrlimit(resource.RLIMIT_NPROC, (int(config["max_processes"]),) * 2)


# Audit events the hook refuses (see make_audit_hook); frozensets, so nothing can add to or remove from them.
PROCESS_EVENTS = frozenset(
    {
        "os.fork",
        "os.forkpty",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.system",
        "subprocess.Popen",
        "pty.spawn",
        "os.killpg",
    }
)
NETWORK_EVENTS = frozenset(
    {
        "socket.connect",
        "socket.bind",
        "socket.sendto",
        "socket.sendmsg",
        "socket.getaddrinfo",
        "socket.gethostbyname",
        "socket.gethostbyaddr",
    }
)
PATH_EVENTS = frozenset(
    {
        "os.remove",
        "os.rmdir",
        "os.mkdir",
        "os.chmod",
        "os.chown",
        "os.truncate",
        "os.utime",
        "os.chflags",
        "os.lchflags",
        "os.mkfifo",
        "os.mknod",
        "os.setxattr",
        "os.removexattr",
    }
)
TWO_PATH_EVENTS = frozenset({"os.rename", "os.link", "os.symlink"})


def make_audit_hook(write_root: str, *, block_network: bool, block_processes: bool, kill_all_is_own: bool):
    """The hook closes over its own references, so rebinding os.path.* or this module's names later does not
    change it. `kill_all_is_own`: kill(-1) reaches only the sandbox's processes (own PID namespace or private
    uid), so it stays allowed: the worker uses it to stop what a cell started."""
    realpath, fsdecode, sep, getpid = os.path.realpath, os.fsdecode, os.sep, os.getpid
    allowed_files = frozenset({os.devnull})
    af_unix = 1
    write_flags = WRITE_FLAGS
    process_events, network_events = PROCESS_EVENTS, NETWORK_EVENTS
    path_events, two_path_events = PATH_EVENTS, TWO_PATH_EVENTS
    own_kill_all = -1 if kill_all_is_own else None

    def inside(path) -> bool:
        if isinstance(path, int):  # an already-open descriptor: its opening was checked
            return True
        resolved = realpath(fsdecode(path))
        return resolved == write_root or resolved.startswith(write_root + sep) or resolved in allowed_files

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            path, _mode, flags = args
            if flags is not None and flags & write_flags and path is not None and not inside(path):
                raise PermissionError(f"sandbox: writing outside the working directory is not allowed: {path}")
        elif event in path_events:
            if not inside(args[0]):
                raise PermissionError(
                    f"sandbox: changing files outside the working directory is not allowed: {args[0]}"
                )
        elif event in two_path_events:
            if not (inside(args[0]) and inside(args[1])):
                raise PermissionError("sandbox: changing files outside the working directory is not allowed")
        elif block_network and event == "socket.__new__" and args[1] != af_unix:
            raise PermissionError("sandbox: network access is disabled")
        elif block_network and event in network_events:
            raise PermissionError("sandbox: network access is disabled")
        elif block_processes and event in process_events:
            raise PermissionError(f"sandbox: starting processes is not allowed ({event})")
        elif block_processes and event == "os.kill" and args[0] not in (getpid(), own_kill_all):
            raise PermissionError("sandbox: signalling other processes is not allowed")
        elif event == "ctypes.dlsym":
            raise PermissionError("sandbox: calling native functions through ctypes is not allowed")

    return hook


def format_exception(exc: BaseException) -> str:
    """A traceback that starts at the user's code (the worker's own frames are noise to the model)."""
    report = traceback.TracebackException.from_exception(exc)
    frames = [frame for frame in report.stack if frame.filename != __file__]
    if isinstance(exc, SyntaxError) or not frames:
        return "".join(report.format_exception_only()).rstrip()
    report.stack = traceback.StackSummary.from_list(frames)
    return "".join(report.format()).rstrip()


def run_cell(code: str, namespace: dict) -> None:
    linecache.cache[CELL_FILENAME] = (len(code), None, code.splitlines(keepends=True), CELL_FILENAME)
    tree = ast.parse(code, CELL_FILENAME, "exec")
    last_expression = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last_expression = ast.Expression(tree.body.pop().value)
    exec(compile(tree, CELL_FILENAME, "exec"), namespace)  # noqa: S102 - this is the sandbox
    if last_expression is not None:
        value = eval(compile(last_expression, CELL_FILENAME, "eval"), namespace)  # noqa: S307
        if value is not None:
            print(repr(value))


def arm_cpu_budget(cpu_s: float) -> None:
    """Let this cell use `cpu_s` more CPU seconds (soft limit; SIGXCPU then raises in user code)."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    spent = used.ru_utime + used.ru_stime
    _soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = int(math.ceil(spent + cpu_s))
    resource.setrlimit(resource.RLIMIT_CPU, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))


def proc_stat(path: str) -> list[bytes] | None:
    """The fields of a /proc stat file from the state on (after the command name), or None once it is gone."""
    try:
        with open(path, "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None


def thread_cpu_ticks() -> dict[str, int]:
    """CPU clock ticks used so far by each thread of this process but the calling one ({} without /proc).

    Thread ids as /proc numbers them: under the namespace fallback /proc is the host's, whose ids differ
    from the worker's own (gettid), hence /proc/thread-self."""
    ticks: dict[str, int] = {}
    try:
        me, tids = os.readlink("/proc/thread-self").rsplit("/", 1)[-1], os.listdir("/proc/self/task")
    except OSError:
        return {}
    for tid in tids:
        if tid != me and (fields := proc_stat(f"/proc/self/task/{tid}/stat")):
            ticks[tid] = int(fields[11]) + int(fields[12])  # utime, stime
    return ticks


def stop_threads(set_async_exc) -> int:
    """Stop the threads the cell left running; returns how many still burn CPU afterwards.

    Each other Python thread gets SystemExit (the one exception a thread ends on without printing a
    traceback) raised at its next instruction, again until it is gone or THREAD_STOP_S passes. A thread
    blocked in C (a sleep, a lock) gets it when it wakes and uses no CPU meanwhile; one that keeps running
    (native code, or a loop that swallows the exception) is counted."""
    me, deadline = threading.get_ident(), time.monotonic() + THREAD_STOP_S
    while others := [ident for ident in sys._current_frames() if ident != me]:
        for ident in others:
            set_async_exc(ctypes.c_ulong(ident), ctypes.py_object(SystemExit))
        if time.monotonic() > deadline:
            break
        time.sleep(0.005)
    before = thread_cpu_ticks()
    if not before:
        return 0
    time.sleep(BUSY_SAMPLE_S)
    after = thread_cpu_ticks()
    return sum(1 for tid, ticks in after.items() if ticks - before.get(tid, ticks) >= BUSY_TICKS)


def process_group_members() -> list[int]:
    """Other processes of this worker's process group (read from /proc; [] without it)."""
    me, group = str(os.getpid()), os.getpgrp()
    entries = os.listdir("/proc") if os.path.isdir("/proc") else []
    return [
        int(entry)
        for entry in entries
        if entry.isdigit() and entry != me and (fields := proc_stat(f"/proc/{entry}/stat")) and int(fields[2]) == group
    ]


def stop_processes(kill_all_is_own: bool) -> None:
    """Kill every process the cell started and reap the worker's children.

    With an own PID namespace or a private uid, kill(-1) reaches exactly the sandbox's other processes
    (pid 1, bubblewrap's init, is spared by the kernel). Otherwise only the worker's process group can be
    found: a process that left it is out of reach (documented for the `process` level)."""
    targets = [-1] if kill_all_is_own else process_group_members()
    for pid in targets:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):  # nothing left / the audit hook (process level)
            pass
    deadline = time.monotonic() + REAP_WAIT_S
    while time.monotonic() < deadline:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:  # no child left
            return
        if pid == 0:
            time.sleep(0.005)


def serve(control_in, control_out, config: dict, set_async_exc) -> None:
    namespace: dict = {"__name__": "__main__", "__builtins__": __builtins__}
    for line in control_in:
        request = json.loads(line)
        arm_cpu_budget(float(request["cpu_s"]))
        signal.setitimer(signal.ITIMER_REAL, float(request["timeout_s"]))
        try:
            error, kind = run_cell_reporting(request, namespace)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        busy_threads = stop_threads(set_async_exc)
        stop_processes(bool(config["kill_all_is_own"]))
        if busy_threads:
            left = f"the code left {busy_threads} thread(s) running that did not stop"
            error, kind = (f"{error}\n{left}" if error else left), kind or "threads"
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os.write(1, request["nonce"].encode("ascii"))
        control_out.write(json.dumps({"error": error, "kind": kind, "restart": bool(busy_threads)}) + "\n")
        control_out.flush()


def run_cell_reporting(request: dict, namespace: dict) -> tuple[str | None, str | None]:
    """Run one cell; (the error to show the model, its kind), both None when it ran cleanly."""
    try:
        run_cell(request["code"], namespace)
    except SandboxTimeout:
        return f"execution timed out after {request['timeout_s']:g} s", "timeout"
    except SandboxCPUTimeExceeded:
        return f"CPU time limit of {request['cpu_s']:g} s exceeded", "cpu"
    except MemoryError as exc:
        return format_exception(exc) + "\n(memory limit reached)", "memory"
    except SystemExit as exc:
        if exc.code not in (None, 0):
            return f"the code called exit({exc.code!r})", "exit"
    except BaseException as exc:  # noqa: BLE001 - any failure of user code is reported to the model
        return format_exception(exc), type(exc).__name__
    return None, None


def main() -> None:
    config = json.loads(sys.argv[1])
    control_in = os.fdopen(os.dup(0), "r", encoding="utf-8")
    control_out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    sys.stdout.reconfigure(encoding="utf-8", errors="backslashreplace", line_buffering=True)
    sys.stderr.reconfigure(encoding="utf-8", errors="backslashreplace", line_buffering=True)
    if config.get("mount_quota_tmpfs"):
        mount_quota_tmpfs(config["workdir"], config["max_disk_mb"], config.get("uid"))
    if config.get("uid") is not None:
        drop_privileges(int(config["uid"]), bool(config["keep_read_access"]))
    os.chdir(config["workdir"])
    sys.path.insert(0, config["workdir"])
    set_limits(config)

    def on_alarm(signum, frame):
        raise SandboxTimeout

    def on_cpu(signum, frame):
        raise SandboxCPUTimeExceeded

    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGXCPU, on_cpu)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an oversized write then fails with EFBIG
    # looked up now: the audit hook refuses ctypes symbol lookups from here on
    set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
    set_async_exc.argtypes, set_async_exc.restype = (ctypes.c_ulong, ctypes.py_object), ctypes.c_int
    sys.addaudithook(
        make_audit_hook(
            os.path.realpath(config["workdir"]),
            block_network=bool(config["block_network"]),
            block_processes=bool(config["block_processes"]),
            kill_all_is_own=bool(config["kill_all_is_own"]),
        )
    )
    control_out.write(json.dumps({"ready": True}) + "\n")
    control_out.flush()
    serve(control_in, control_out, config, set_async_exc)


if __name__ == "__main__":
    main()
