"""The process inside the Python sandbox: lock itself down, then run the code cells the parent sends.

Run as a script, never imported: `python -I -B _sandbox_worker.py CONFIG_JSON` (it imports nothing of
tfgrpo, so the sandbox starts fast and sees no project code). Order matters:

1. keep private copies of stdin/stdout as the control channel (requests in, JSON replies out), point
   fd 0 at /dev/null and fd 1 at the output pipe (fd 2), so user code can only print;
2. if started as root: drop to the unprivileged uid the parent chose (keeping only CAP_DAC_READ_SEARCH
   so the interpreter can still read its own files when they live under a private home directory);
3. chdir into the fresh working directory and set the resource limits (address space, CPU time,
   file size, open files, process count when the uid is private);
4. install an audit hook (PEP 578) that refuses network sockets, process creation, native symbol
   lookup (ctypes) and any write outside the working directory. Audit hooks cannot be removed from
   Python, but they are a guard against careless code, not a security boundary: the kernel-level
   layers (network namespace, private uid, rlimits, process-group kill) are what hold against malice.

Each request is one line of JSON {"code", "nonce", "timeout_s", "cpu_s"}. The cell runs in one
namespace that persists between requests (a notebook); if the last statement is an expression its
repr is printed. After the cell the worker writes the nonce sentinel to the output pipe (so the parent
knows where this cell's output ends) and one JSON reply line {"error", "kind"} to the control channel.
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
import traceback

CELL_FILENAME = "<cell>"
PR_SET_KEEPCAPS = 8
CAP_DAC_READ_SEARCH = 2
LINUX_CAPABILITY_VERSION_3 = 0x20080522
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


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


def make_audit_hook(write_root: str, *, block_network: bool, block_processes: bool):
    """The hook closes over its own references, so rebinding os.path.* or this module's names later does not
    change it."""
    realpath, fsdecode, sep, getpid = os.path.realpath, os.fsdecode, os.sep, os.getpid
    allowed_files = frozenset({os.devnull})
    af_unix = 1
    write_flags = WRITE_FLAGS
    process_events, network_events = PROCESS_EVENTS, NETWORK_EVENTS
    path_events, two_path_events = PATH_EVENTS, TWO_PATH_EVENTS

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
        elif block_processes and event == "os.kill" and args[0] != getpid():
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


def serve(control_in, control_out) -> None:
    namespace: dict = {"__name__": "__main__", "__builtins__": __builtins__}
    for line in control_in:
        request = json.loads(line)
        error, kind = None, None
        arm_cpu_budget(float(request["cpu_s"]))
        signal.setitimer(signal.ITIMER_REAL, float(request["timeout_s"]))
        try:
            run_cell(request["code"], namespace)
        except SandboxTimeout:
            error, kind = f"execution timed out after {request['timeout_s']:g} s", "timeout"
        except SandboxCPUTimeExceeded:
            error, kind = f"CPU time limit of {request['cpu_s']:g} s exceeded", "cpu"
        except MemoryError as exc:
            error, kind = format_exception(exc) + "\n(memory limit reached)", "memory"
        except SystemExit as exc:
            if exc.code not in (None, 0):
                error, kind = f"the code called exit({exc.code!r})", "exit"
        except BaseException as exc:  # noqa: BLE001 - any failure of user code is reported to the model
            error, kind = format_exception(exc), type(exc).__name__
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os.write(1, request["nonce"].encode("ascii"))
        control_out.write(json.dumps({"error": error, "kind": kind}) + "\n")
        control_out.flush()


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
    sys.addaudithook(
        make_audit_hook(
            os.path.realpath(config["workdir"]),
            block_network=bool(config["block_network"]),
            block_processes=bool(config["block_processes"]),
        )
    )
    control_out.write(json.dumps({"ready": True}) + "\n")
    control_out.flush()
    serve(control_in, control_out)


if __name__ == "__main__":
    main()
