"""The code reward's disk and folders: a total cap under bubblewrap (the per-file limit only as a plain
process), and the folders of a run killed with `kill -9` removed by the next run's first batch.

Issue 27: a candidate wrote 320 MiB into the host's /tmp under bubblewrap (16 MiB per file, the host folder
bound in), and every killed run left its `tfgrpo-code-*` folders behind for good.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from tfgrpo.rewards.code import CodeReward
from tfgrpo.rewards.sandbox_folders import OWNER_MARKER, SandboxFolder

pytestmark = pytest.mark.timeout(180)

REPO = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024
#: writes `count` files of 1 MiB each (under the 16 MiB per-file limit), stops at the first error
FILL_THE_DISK = """
written, failure = 0, None
for index in range({count}):
    try:
        with open(f"fill-{{index}}.bin", "wb") as f:
            f.write(b"x" * (1 << 20))
        written += 1 << 20
    except OSError as exc:
        failure = exc.errno
        break

def outcome():
    return failure, written
"""
#: a run scoring one candidate that sleeps: its two folders stay claimed until it is killed
RUN_HOLDING_FOLDERS = textwrap.dedent("""
    from tfgrpo.rewards.code import CodeReward
    reward = CodeReward(sandbox="bubblewrap", timeout_s=600)
    reward.score(["```python\\nimport time\\ntime.sleep(600)\\n```"], tests=[["assert True"]])
""")


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


@pytest.fixture()
def folder_contents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, int]]:
    """What each code folder held on the host (file -> bytes) when it was released; a temp dir of our own."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    seen: dict[str, dict[str, int]] = {}
    release = SandboxFolder.release

    def record_then_release(folder: SandboxFolder) -> None:
        if os.path.isdir(folder.path):
            files = [Path(root, name) for root, _, names in os.walk(folder.path) for name in names]
            seen[Path(folder.path).name] = {str(f.relative_to(folder.path)): f.stat().st_size for f in files}
        release(folder)

    monkeypatch.setattr(SandboxFolder, "release", record_then_release)
    return seen


def test_writing_past_the_cap_fails_with_enospc_and_the_host_disk_gets_nothing(folder_contents):
    reward = CodeReward(sandbox="bubblewrap", max_disk_mb=4, timeout_s=20)
    tests = ["assert outcome()[0] == 28", "assert 2 * 2**20 <= outcome()[1] <= 4 * 2**20"]
    (score,) = reward.score([fenced(FILL_THE_DISK.format(count=24))], tests=[tests])
    assert score.value == 1.0, score.reason  # ENOSPC inside, within the cap; and the reward gave its verdict
    candidate = {name: files for name, files in folder_contents.items() if not name.startswith("tfgrpo-code-tests-")}
    harness = {name: files for name, files in folder_contents.items() if name.startswith("tfgrpo-code-tests-")}
    assert len(candidate) == len(harness) == 1
    # the host folder is only the tmpfs's mount point: the program's own file, the marker, nothing written
    assert set(*candidate.values()) == {OWNER_MARKER, "solution.py"}
    assert set(*harness.values()) == {OWNER_MARKER, "candidate-stderr.txt"}
    assert sum(size for files in folder_contents.values() for size in files.values()) < 4096


def test_a_plain_process_has_the_per_file_limit_only(folder_contents):
    """The documented `process` level: no total cap (all 8 MiB land in the host folder), 16 MiB per file."""
    program = FILL_THE_DISK.format(count=8) + textwrap.dedent("""
        def one_big_file():
            try:
                with open("big.bin", "wb") as f:
                    f.write(b"x" * (17 << 20))
            except OSError as exc:
                return exc.errno
    """)
    tests = ["assert outcome() == (None, 8 * 2**20)", f"assert one_big_file() == {errno.EFBIG}"]
    reward = CodeReward(sandbox="process", max_disk_mb=4, timeout_s=20)
    (score,) = reward.score([fenced(program)], tests=[tests])
    assert score.value == 1.0, score.reason
    (candidate,) = [files for name, files in folder_contents.items() if not name.startswith("tfgrpo-code-tests-")]
    assert sum(size for name, size in candidate.items() if name.startswith("fill-")) == 8 * MIB
    assert candidate["big.bin"] == 16 * MIB


def processes_naming(text: str) -> list[int]:
    """Pids whose command line holds `text` (the sandboxes name their folder in theirs)."""
    pids = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and text.encode() in Path("/proc", entry, "cmdline").read_bytes():
                pids.append(int(entry))
        except OSError:
            continue
    return pids


def start_run(tmp_dir: Path) -> tuple[subprocess.Popen, list[Path]]:
    """A run whose candidate and harness are both started, and its two claimed folders."""
    env = {"PATH": os.defpath, "TMPDIR": str(tmp_dir), "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    before = set(tmp_dir.glob("tfgrpo-code-*"))
    run = subprocess.Popen([sys.executable, "-c", RUN_HOLDING_FOLDERS], env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        folders = sorted(set(tmp_dir.glob("tfgrpo-code-*")) - before)
        if len(folders) == 2 and all(processes_naming(str(folder)) for folder in folders):
            return run, folders
        assert run.poll() is None, "the run ended before it claimed its folders"
        time.sleep(0.1)
    run.kill()
    raise AssertionError("the run never started both sandboxes")


def kill_and_wait(run: subprocess.Popen, folders: list[Path]) -> None:
    run.send_signal(signal.SIGKILL)
    run.wait()
    deadline = time.monotonic() + 10  # bubblewrap's --die-with-parent takes the sandboxes with it
    while any(processes_naming(str(folder)) for folder in folders) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(processes_naming(str(folder)) for folder in folders)


def test_the_next_run_removes_the_folders_of_a_killed_run_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    live, alive = start_run(tmp_path)
    killed, stale = start_run(tmp_path)
    legacy = Path(tempfile.mkdtemp(prefix="tfgrpo-code-"))  # as older tfgrpo left them: no marker
    try:
        kill_and_wait(killed, stale)
        assert all((folder / OWNER_MARKER).is_file() for folder in stale + alive)
        (score,) = CodeReward(sandbox="bubblewrap").score(
            [fenced("def f():\n    return 1")], tests=[["assert f() == 1"]]
        )
        assert score.value == 1.0, score.reason
        assert not any(folder.exists() for folder in stale)
        assert all((folder / OWNER_MARKER).is_file() for folder in alive)
        assert legacy.is_dir()
    finally:
        kill_and_wait(live, alive)
