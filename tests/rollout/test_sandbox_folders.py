"""Sandbox folders on the host: a run killed with `kill -9` leaves its folders, the next start removes
them, and a live run's folders (or ones without the owner marker) are never touched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from tfgrpo.rewards.sandbox_folders import OWNER_MARKER, SandboxFolder, remove_stale_folders
from tfgrpo.rollout.tools.python_sandbox import PythonTool

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]
#: a run with two open python-tool sessions that prints their folders, then waits to be killed
RUN_WITH_SESSIONS = textwrap.dedent("""
    import asyncio
    from tfgrpo.rollout.tools.python_sandbox import PythonTool

    async def main():
        tool = PythonTool(timeout_s=5)
        async with tool.session() as first, tool.session() as second:
            for python in (first, second):
                print((await python.run({"code": "import os\\nopen('notes', 'w').write('x')\\nos.getcwd()"})).output)
            print("READY", flush=True)
            await asyncio.sleep(600)

    asyncio.run(main())
""")


def start_run(tmp_dir: Path) -> tuple[subprocess.Popen, list[Path]]:
    env = {"PATH": os.defpath, "TMPDIR": str(tmp_dir), "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    run = subprocess.Popen([sys.executable, "-c", RUN_WITH_SESSIONS], stdout=subprocess.PIPE, text=True, env=env)
    lines = []
    while (line := run.stdout.readline()) and line.strip() != "READY":
        lines.append(line.strip().strip("'"))
    folders = [Path(line) for line in lines if line]
    assert len(folders) == 2 and all(folder.parent == tmp_dir for folder in folders), lines
    return run, folders


@pytest.fixture()
def sandbox_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temp dir of our own, so no other test's (or run's) sandbox folder is in play."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


async def test_next_start_removes_the_folders_of_a_killed_run_only(sandbox_tmp: Path):
    live, alive = start_run(sandbox_tmp)
    killed, stale = start_run(sandbox_tmp)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    legacy = Path(tempfile.mkdtemp(prefix="tfgrpo-sandbox-"))  # as older tfgrpo left them: no marker
    try:
        assert all(folder.is_dir() for folder in stale + alive)
        result = await PythonTool(timeout_s=5).run({"code": "print('started')"})
        assert result.output == "started\n"
        assert not any(folder.exists() for folder in stale)
        assert all((folder / OWNER_MARKER).is_file() for folder in alive)
        assert legacy.is_dir()
    finally:
        live.kill()
        live.wait()


def test_a_claimed_folder_is_kept_while_held_and_removed_with_its_owner(sandbox_tmp: Path):
    folder = SandboxFolder()
    assert (Path(folder.path) / OWNER_MARKER).read_text().startswith(f"pid {os.getpid()} ")
    assert remove_stale_folders() == []
    folder.release()
    assert not os.path.exists(folder.path)
    folder.release()  # twice is harmless


def test_a_symlink_named_like_a_sandbox_folder_is_not_followed(sandbox_tmp: Path, tmp_path_factory):
    target = tmp_path_factory.mktemp("victim")
    (target / OWNER_MARKER).write_text("forged")
    (sandbox_tmp / "tfgrpo-sandbox-forged").symlink_to(target)
    assert remove_stale_folders() == []
    assert (target / OWNER_MARKER).exists()
