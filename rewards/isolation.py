"""Run untrusted Python under bubblewrap (`bwrap`): the kernel-level sandbox shared by the code reward
and the `python` tool.

What the sandboxed process sees (docs/security.md has the threat model):

- its own PID namespace and its own `/proc`: no other process of the machine is visible, so no
  `/proc/<pid>/cmdline` or `environ` of the parent (where an `--api-key` would show) can be read, and
  the parent cannot be signalled;
- a read-only view of only what Python needs: `/usr` (shared libraries), the interpreter's install
  tree and the virtual environment, the loader cache; nothing of `/etc` but that, no home directory,
  no run directory, no project code;
- one private writable directory (the working directory, bound at its own path), or, with a disk
  quota, a size-capped tmpfs at that path and everything else read-only (the host disk is untouched);
- no network (its own network namespace), no IPC, its own hostname; `--die-with-parent` and
  `--new-session` so a killed parent takes the sandbox with it and the code cannot reach a terminal.

bubblewrap was chosen over nsjail by measurement and availability (docs/security.md): it is in
Debian's main archive, works here as root and unprivileged, and starts in ~40 ms.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

#: files of the host that the dynamic loader reads; bound read-only when present
LOADER_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf")
#: top-level links of a merged-/usr system (/lib -> usr/lib ...), recreated inside
USR_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
PROBE_TIMEOUT_S = 20.0
#: processes model-written code may run at once (RLIMIT_NPROC): the code reward's cap and the python tool's default
MAX_PROCESSES = 32
PROBE_QUOTA_BYTES = 1024 * 1024


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


@lru_cache(maxsize=8)
def python_binds(python: str) -> tuple[tuple[str, str], ...]:
    """(host source, path inside) pairs that make `python` runnable: its venv and its base install.

    A venv reached through a symlink (e.g. `.venv -> /elsewhere/.venv`) is bound at the path the
    interpreter is called by, so the venv's `pyvenv.cfg` is found where Python looks for it."""
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        prefixes = [sys.prefix, sys.base_prefix]
    else:
        reply = subprocess.run(
            [python, "-I", "-c", "import sys, json; print(json.dumps([sys.prefix, sys.base_prefix]))"],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=True,
        )
        prefixes = json.loads(reply.stdout)
    called_as = os.path.dirname(os.path.dirname(os.path.abspath(python)))
    binds: dict[str, str] = {}
    for inside in [called_as, *prefixes]:
        if inside.startswith("/usr/") or inside == "/usr" or not os.path.isdir(inside):
            continue
        binds.setdefault(os.path.abspath(inside), os.path.realpath(inside))
    return tuple((source, inside) for inside, source in binds.items())


def _parents(path: str) -> list[str]:
    parts = Path(path).parents
    return [str(parent) for parent in reversed(list(parts)) if str(parent) != "/"]


def bwrap_command(
    python: str,
    *,
    workdir: str,
    read_only: dict[str, str] | None = None,
    user_namespace: bool,
    disk_quota_bytes: int | None = None,
) -> list[str]:
    """The `bwrap ...` prefix that runs `python` (append its arguments) in the sandbox described above.

    `read_only` maps extra host files to paths inside (e.g. a worker script). With `user_namespace`
    the process runs as uid 65534 of a fresh user namespace (its capabilities reach nothing outside);
    without it (the caller is root and drops to a private uid itself) only CAP_SETUID/CAP_SETGID are
    kept for that drop.

    With `disk_quota_bytes` the host `workdir` is not bound: the sandbox gets an empty tmpfs of that
    size at its path instead (writing past it fails with ENOSPC), and bwrap's own root and /dev
    (writable by the sandbox uid under a user namespace, sized only by RAM) are remounted read-only,
    so the quota caps everything the code can write."""
    bwrap = bwrap_path()
    if bwrap is None:
        raise FileNotFoundError("bwrap (bubblewrap) is not installed")
    command = [
        bwrap,
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--hostname",
        "sandbox",
    ]
    if user_namespace:
        command += ["--unshare-user", "--uid", "65534", "--gid", "65534", "--cap-drop", "ALL"]
    else:
        command += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    command += ["--ro-bind", "/usr", "/usr"]
    for link in USR_LINKS:
        if os.path.islink(link):
            command += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            command += ["--ro-bind", link, link]
    command += _mount_arguments(python, workdir, read_only or {}, disk_quota_bytes)
    command += ["--proc", "/proc", "--dev", "/dev"]
    if disk_quota_bytes is not None:
        command += ["--remount-ro", "/", "--remount-ro", "/dev"]
    command += ["--chdir", "/"]
    return command


def _mount_arguments(python: str, workdir: str, read_only: dict[str, str], disk_quota_bytes: int | None) -> list[str]:
    """The read-only binds (loader, Python, `read_only`) and the writable work dir, parents made first.

    A `read_only` file inside the work dir (the code reward's program) is bound after the work dir's
    mount, so a quota tmpfs there does not cover it."""
    binds = [(path, path) for path in LOADER_FILES if os.path.exists(path)]
    binds += [*python_binds(python), *read_only.items()]
    inside_workdir = [(source, inside) for source, inside in binds if Path(inside).is_relative_to(workdir)]
    mounts = [
        (inside, ["--ro-bind", source, inside]) for source, inside in binds if (source, inside) not in inside_workdir
    ]
    if disk_quota_bytes is None:
        mounts.append((workdir, ["--bind", workdir, workdir]))
    else:  # 1777: under root the tmpfs belongs to root, and the worker writes as its private uid
        mounts.append((workdir, ["--perms", "1777", "--size", str(int(disk_quota_bytes)), "--tmpfs", workdir]))
    mounts += [(inside, ["--ro-bind", source, inside]) for source, inside in inside_workdir]
    arguments: list[str] = []
    created: set[str] = set()
    for inside, mount in mounts:
        for parent in _parents(inside):
            # parents bwrap would create copy the mode of nothing useful (0700): make them traversable
            if parent not in created and not parent.startswith("/usr"):
                arguments += ["--perms", "0755", "--dir", parent]
                created.add(parent)
        arguments += mount
        created.add(inside)  # a mount point already there: never re-made (and re-moded) as a parent
    return arguments


@lru_cache(maxsize=8)
def probe_bubblewrap(python: str, user_namespace: bool, *, disk_quota: bool = False) -> str | None:
    """None when `python` runs under the sandbox here (with `disk_quota`: also the quota's tmpfs and
    read-only root: `--size` needs bwrap >= 0.7, not setuid), else why not (one line)."""
    if bwrap_path() is None:
        return "bwrap is not installed (apt-get install bubblewrap)"
    with tempfile.TemporaryDirectory(prefix="tfgrpo-bwrap-probe-") as workdir:
        try:
            quota = PROBE_QUOTA_BYTES if disk_quota else None
            command = bwrap_command(python, workdir=workdir, user_namespace=user_namespace, disk_quota_bytes=quota)
            probe = subprocess.run(
                [*command, python, "-I", "-c", "import os; os.listdir('/proc')"],
                capture_output=True,
                timeout=PROBE_TIMEOUT_S,
                check=False,
                env={"PATH": os.defpath},
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return f"bwrap failed to start: {exc}"
    if probe.returncode != 0:
        return "bwrap failed: " + probe.stderr.decode("utf-8", errors="replace").strip()[-300:]
    return None


__all__ = ["MAX_PROCESSES", "bwrap_command", "bwrap_path", "probe_bubblewrap", "python_binds"]
