"""A throwaway PostgreSQL server for tests: initdb + pg_ctl in a temp dir, on a free port.

PostgreSQL refuses to run as root, so as root (CI) the server runs as the `postgres` user that
Debian's package creates (`runuser -u postgres`). Not installed is a test failure, never a skip:
scripts/install.sh installs it.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests.helpers.servers import free_port


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """Yield a SQLAlchemy URL (`postgresql+psycopg://tfgrpo@127.0.0.1:PORT/postgres`) of a fresh server."""
    bindirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    if not bindirs:
        raise RuntimeError("PostgreSQL is not installed (apt-get install -y postgresql; scripts/install.sh does it)")
    bindir = Path(bindirs[-1])
    root = Path(tempfile.mkdtemp(prefix="tfgrpo-pg-"))
    prefix: list[str] = []
    if os.geteuid() == 0:
        account = pwd.getpwnam("postgres")
        os.chown(root, account.pw_uid, account.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    port = free_port()
    data, log = root / "data", root / "server.log"
    try:
        subprocess.run(
            [*prefix, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "tfgrpo", "--no-sync"],
            check=True,
            capture_output=True,
        )
        options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
        subprocess.run(
            [
                *prefix,
                str(bindir / "pg_ctl"),
                "-D",
                str(data),
                "-o",
                options,
                "-l",
                str(log),
                "-w",
                "-t",
                "60",
                "start",
            ],
            check=True,
            capture_output=True,
        )
        yield f"postgresql+psycopg://tfgrpo@127.0.0.1:{port}/postgres"
    finally:
        if (data / "postmaster.pid").exists():
            subprocess.run(
                [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"], capture_output=True
            )
        shutil.rmtree(root, ignore_errors=True)
