"""Issue 43: a read-only --out and a disk that fills at several points of a run (before step 1's logs, inside
step 1, inside step 2) are one line each, the HTTP client is closed all the same, and the run resumes to the
rows of a run that was never interrupted."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cli import run_cli
from tests.helpers.disk_full import run_cli_until_disk_full
from tests.helpers.learn_world import World, WorldServer, read_jsonl, write_problems

pytestmark = pytest.mark.timeout(180)

OPTIONS = ("-G", "2", "--epochs", "1", "--batch-size", "2", "--dedup", "off")
PAIRS = [(1, 2), (3, 4), (5, 6), (7, 8)]


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


@pytest.mark.parametrize("writes", [3, 12, 25])  # before step 1's logs, inside step 1, inside step 2
def test_a_disk_that_fills_mid_run_is_one_line_and_resume_ends_as_an_uninterrupted_run(tmp_path, writes) -> None:
    data = write_problems(tmp_path / "train.jsonl", PAIRS)
    with WorldServer(World()) as server:  # a server of its own: it numbers the samples it answers
        assert run_cli(*server.learn_args(data, tmp_path / "ref" / "run", *OPTIONS)) == 0
    with WorldServer(World()) as server:
        out = tmp_path / "full" / "run"  # the same folder name: provenance records it
        full = run_cli_until_disk_full(server.learn_args(data, out, *OPTIONS), writes)
        errors = [line for line in _error_lines(full.stderr) if not line.startswith("step ")]
        assert full.returncode == 2, full.stderr
        assert "Traceback" not in full.stderr and "Unclosed" not in full.stderr
        assert errors[0].startswith(f"error: {out}") and "No space left on device" in errors[0], errors
        assert len(errors) == 1 and "--resume" in errors[0]  # the error, and how to go on once there is room
        assert run_cli(*server.learn_args(data, out, *OPTIONS, "--resume")) == 0
    state = json.loads((out / "state.json").read_text(encoding="utf-8"))
    assert state["status"] == "completed" and state["completed_step"] == 2
    assert _rollouts(out) == _rollouts(tmp_path / "ref" / "run")  # none lost, none written twice
    library = json.loads((out / "library.json").read_text(encoding="utf-8"))
    assert library["experiences"] and library["version"] == state["steps"][-1]["library_version"]


def _rollouts(run: Path) -> list[tuple]:
    # which completion a sample gets depends on the order concurrent requests reach the server; the rows do not
    return [(row["step"], row["query_id"], row["sample"]) for row in read_jsonl(run / "rollouts.jsonl")]


def _read_only_cli(folder: Path, args: list[str]) -> subprocess.CompletedProcess:
    """The CLI with `folder` read-only: chmod for a user, a read-only tmpfs in a mount namespace for root."""
    folder.mkdir()
    code = f"import sys; from tfgrpo.cli.app import main; sys.argv[0] = 'tfgrpo'; main({args!r})"
    command = [sys.executable, "-c", code]
    if os.geteuid() != 0:
        folder.chmod(0o555)
    elif shutil.which("unshare") and subprocess.run(["unshare", "-m", "true"], check=False).returncode == 0:
        mount = f'mount -t tmpfs -o ro tmpfs {folder} && exec "$@"'
        command = ["unshare", "-m", "sh", "-c", mount, "sh", *command]
    else:
        pytest.skip("running as root without mount namespaces: no folder can be made read-only")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False, env=env)


def test_out_on_a_read_only_folder_is_one_line(tmp_path: Path) -> None:
    data = write_problems(tmp_path / "train.jsonl", PAIRS)
    with WorldServer(World()) as server:
        result = _read_only_cli(tmp_path / "ro", server.learn_args(data, tmp_path / "ro" / "run", *OPTIONS))
    assert result.returncode == 2, result.stderr
    lines = _error_lines(result.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(tmp_path / "ro") in lines[0], result.stderr
    assert "Read-only file system" in lines[0] or "Permission denied" in lines[0], result.stderr
