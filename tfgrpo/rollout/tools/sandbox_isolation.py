"""Which isolation level the Python sandbox gets on this machine (probed once per tool).

bubblewrap first (`tfgrpo.rewards.isolation`); `unshare` namespaces or a plain process only as a fallback,
logged as a warning, because there the code can read the host's /proc and files (docs/security.md).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys

from pydantic import BaseModel, Field

from tfgrpo.rewards.isolation import probe_bubblewrap
from tfgrpo.rollout.tools.base import ToolError

logger = logging.getLogger(__name__)


class Isolation(BaseModel):
    """What the kernel can do for us here (probed once)."""

    unshare_prefix: list[str] = Field(default_factory=list)
    private_uid: bool = False
    bubblewrap: bool = False
    #: whether bwrap can give the work dir a size-capped tmpfs (`--size`: bwrap >= 0.7)
    bwrap_quota: bool = False
    #: why a stronger level was not used (None when bubblewrap is in use or was not asked for)
    fallback_reason: str | None = None

    @property
    def namespaces(self) -> bool:
        return bool(self.unshare_prefix) or self.bubblewrap

    @property
    def disk_quota(self) -> bool:
        """Whether the work dir can be a size-capped tmpfs (bwrap, or an own mount namespace for the worker)."""
        return self.bwrap_quota if self.bubblewrap else "--mount" in self.unshare_prefix

    @property
    def kill_all_is_own(self) -> bool:
        """Whether kill(-1) inside reaches only the sandbox's processes (own PID namespace or private uid)."""
        return self.namespaces or self.private_uid

    @property
    def level(self) -> str:
        return "bubblewrap" if self.bubblewrap else "namespace" if self.unshare_prefix else "process"

    def describe(self) -> str:
        if self.bubblewrap:
            uid = "private uid" if self.private_uid else "user namespace"
            workdir = "on a size-capped tmpfs, nothing else writable" if self.disk_quota else "(no disk quota)"
            return (
                f"bubblewrap: own /proc and PID, network namespace, IPC namespaces; read-only /usr and Python "
                f"only; private working directory {workdir}; {uid} + rlimits + audit hook"
            )
        network = "network namespace" if self.namespaces else "audit hook (no network namespace available)"
        writes = "private uid + audit hook" if self.private_uid else "audit hook only"
        processes = "PID namespace + process-group kill" if self.namespaces else "process-group kill"
        if self.private_uid:
            processes += " + RLIMIT_NPROC"
        disk = (
            "work dir on a size-capped tmpfs; what else the kernel lets it write on the host is not capped"
            if self.disk_quota
            else "per-file size limit only (no total cap)"
        )
        return (
            f"FALLBACK {self.level} (weaker than bubblewrap: host /proc and files readable); "
            f"network: {network}; writes: {writes}; disk: {disk}; processes: {processes}"
        )


def probe_isolation(mode: str, python: str | None = None) -> Isolation:
    """Find the strongest isolation this machine allows (`mode` names a level to require, or "auto").

    Anything weaker than bubblewrap is logged as a warning: there the code can read what the
    user running tfgrpo can read."""
    is_root = os.geteuid() == 0
    reason = None
    if mode in ("auto", "bubblewrap"):
        python = python or sys.executable
        reason = probe_bubblewrap(python, not is_root)
        if reason is None:
            quota_reason = probe_bubblewrap(python, not is_root, disk_quota=True)
            if quota_reason is not None:  # still far stronger than the fallbacks: keep it, say what is missing
                logger.warning(
                    "python sandbox: bwrap gives no disk quota here (%s); max_disk_mb is not enforced", quota_reason
                )
            return Isolation(bubblewrap=True, private_uid=is_root, bwrap_quota=quota_reason is None)
        if mode == "bubblewrap":
            raise ToolError(f"python sandbox: isolation 'bubblewrap' is unavailable: {reason}")
    isolation = _probe_fallback(mode, is_root)
    if mode == "auto":
        isolation.fallback_reason = reason
        logger.warning(
            "python sandbox: bubblewrap unavailable (%s); FALLING BACK to %s isolation: model code "
            "can read the host's /proc and files (see docs/security.md)",
            reason,
            isolation.level,
        )
    return isolation


def _probe_fallback(mode: str, is_root: bool) -> Isolation:
    unshare = shutil.which("unshare")
    if mode != "process" and unshare:
        # --mount: the worker, root of its own mount namespace, covers its work dir with the quota tmpfs
        namespaces = ["--mount", "--net", "--pid", "--fork", "--kill-child"]
        candidates = [[unshare, *namespaces]]
        if not is_root:
            candidates.append([unshare, "--user", "--map-root-user", *namespaces])
        for prefix in candidates:
            try:
                probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=10, check=False)
            except (OSError, subprocess.TimeoutExpired):
                continue
            if probe.returncode == 0:
                return Isolation(unshare_prefix=prefix, private_uid=is_root)
    if mode == "namespace":
        raise ToolError(
            "python sandbox: isolation 'namespace' needs a working `unshare --net --pid` "
            "(root or unprivileged user namespaces); use isolation: auto or process"
        )
    return Isolation(private_uid=is_root)


__all__ = ["Isolation", "probe_isolation"]
