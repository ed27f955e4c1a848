"""Which isolation level the Python sandbox gets on this machine (probed once per tool).

bubblewrap first (`rewards.isolation`); `unshare` namespaces or a plain process only as a fallback,
logged as a warning, because there the code can read the host's /proc and files (docs/security.md).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys

from pydantic import BaseModel, Field

from rewards.isolation import probe_bubblewrap
from tfgrpo.rollout.tools.base import ToolError

logger = logging.getLogger(__name__)


class Isolation(BaseModel):
    """What the kernel can do for us here (probed once)."""

    unshare_prefix: list[str] = Field(default_factory=list)
    private_uid: bool = False
    bubblewrap: bool = False
    #: why a stronger level was not used (None when bubblewrap is in use or was not asked for)
    fallback_reason: str | None = None

    @property
    def namespaces(self) -> bool:
        return bool(self.unshare_prefix) or self.bubblewrap

    @property
    def level(self) -> str:
        return "bubblewrap" if self.bubblewrap else "namespace" if self.unshare_prefix else "process"

    def describe(self) -> str:
        if self.bubblewrap:
            uid = "private uid" if self.private_uid else "user namespace"
            return (
                f"bubblewrap: own /proc and PID, network namespace, IPC namespaces; read-only /usr and Python "
                f"only; private working directory; {uid} + rlimits + audit hook"
            )
        network = "network namespace" if self.namespaces else "audit hook (no network namespace available)"
        writes = "private uid + audit hook" if self.private_uid else "audit hook only"
        processes = "PID namespace + process-group kill" if self.namespaces else "process-group kill"
        if self.private_uid:
            processes += " + RLIMIT_NPROC"
        return (
            f"FALLBACK {self.level} (weaker than bubblewrap: host /proc and files readable); "
            f"network: {network}; writes: {writes}; processes: {processes}"
        )


def probe_isolation(mode: str, python: str | None = None) -> Isolation:
    """Find the strongest isolation this machine allows (`mode` names a level to require, or "auto").

    Anything weaker than bubblewrap is logged as a warning: there the code can read what the
    user running tfgrpo can read."""
    is_root = os.geteuid() == 0
    reason = None
    if mode in ("auto", "bubblewrap"):
        reason = probe_bubblewrap(python or sys.executable, not is_root)
        if reason is None:
            return Isolation(bubblewrap=True, private_uid=is_root)
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
        candidates = [[unshare, "--net", "--pid", "--fork", "--kill-child"]]
        if not is_root:
            candidates.append([unshare, "--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child"])
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
