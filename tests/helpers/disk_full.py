"""Run the `tfgrpo` CLI in a subprocess whose disk "fills" after N file writes (issue 43's ENOSPC row).

The atomic writer and the log appender are the project's only write paths for run state; from the N-th
call on they raise `OSError(ENOSPC)` as a full disk would, before touching the file (a real full disk fails
the temp file's write, which the rename never follows, so the target is left as it was either way).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

WRAPPER = """
import errno, os, sys
import tfgrpo.core.atomic as atomic

writes_left = [int(os.environ["TFGRPO_TEST_WRITES_BEFORE_ENOSPC"])]

def failing(write):
    def wrapper(path, *args, **kwargs):
        if writes_left[0] <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        writes_left[0] -= 1
        return write(path, *args, **kwargs)
    return wrapper

atomic.atomic_write_text = failing(atomic.atomic_write_text)
atomic.append_lines = failing(atomic.append_lines)
from tfgrpo.cli.app import main
sys.argv[0] = "tfgrpo"
main()
"""


def run_cli_until_disk_full(args: list[str], writes: int, *, timeout_s: float = 120) -> subprocess.CompletedProcess:
    """`tfgrpo ARGS` with the disk full after `writes` writes; stdout and stderr captured as text."""
    env = {**os.environ, "TFGRPO_TEST_WRITES_BEFORE_ENOSPC": str(writes)}
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    command = [sys.executable, "-c", WRAPPER, *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
