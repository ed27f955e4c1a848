"""Files that cannot be lost or wedged: locked read-modify-write, kills at every commit step, modes kept,
one writer per learn run directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from filelock import FileLock

from tfgrpo.core.atomic import CRASH_ENV, CRASH_EXIT_CODE, LockTimeoutError, atomic_write_text, locked
from tfgrpo.core.config import ConfigError
from tfgrpo.experiences import History, Library
from tfgrpo.learn.config import LearnConfig
from tfgrpo.learn.rundir import RunDir

pytestmark = pytest.mark.timeout(300)

PROJECT = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(PROJECT), "OMP_NUM_THREADS": "1", **extra}


def _library(tmp_path: Path) -> Path:
    path = tmp_path / "library.json"
    path.write_text(json.dumps({"version": 0, "experiences": [{"id": "G0", "text": "Check bounds."}]}))
    return path


def _reply(tmp_path: Path, name: str, text: str) -> Path:
    reply = tmp_path / f"{name}.txt"
    reply.write_text(json.dumps([{"option": "add", "experience": text}]))
    return reply


def _apply(lib: Path, reply: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tfgrpo", "library", "apply", str(lib), str(reply)],
        capture_output=True,
        text=True,
        env=_env(**env),
        cwd=PROJECT,
        timeout=120,
    )


def _temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*.tmp")]


# -- defect 3: a kill between the history commit and the library save wedged every later apply ----------
def test_a_kill_at_every_commit_step_recovers_on_the_next_apply(tmp_path: Path) -> None:
    crashed_at = []
    for point in range(1, 30):
        case = tmp_path / f"kill{point}"
        case.mkdir()
        lib = _library(case)
        first = _apply(lib, _reply(case, "first", "Verify by substitution."), **{CRASH_ENV: str(point)})
        if first.returncode == 0:
            break  # the commit has fewer crash points than `point`: every one was tried
        assert first.returncode == CRASH_EXIT_CODE, first.stderr
        crashed_at.append(point)
        second = _apply(lib, _reply(case, "second", "Draw a diagram."))
        assert second.returncode == 0, f"kill at point {point} wedged the library: {second.stdout}{second.stderr}"
        library = Library.load(lib)
        texts = [e.text for e in library.experiences]
        assert "Draw a diagram." in texts and "Check bounds." in texts
        history = History.for_library(lib)
        assert history.versions()[-1] == library.version, point
        assert [(e.id, e.text) for e in history.load(library.version).experiences] == [
            (e.id, e.text) for e in library.experiences
        ]
        assert _temp_files(case) == [], f"kill at point {point} left temp files behind"
        records = history.records()  # every line of the op log parses
        assert records and records[-1]["version"] == library.version
    else:
        pytest.fail("the commit never completed")
    # baseline snapshot, new snapshot, op log, library file, and the rename of each atomic write
    assert len(crashed_at) >= 6, crashed_at


# -- defect 2: concurrent `library apply` lost updates -----------------------------------------------------
WRITER = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from typer.testing import CliRunner
    from tfgrpo.cli.app import app
    lib, name, rounds = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    runner = CliRunner()
    for i in range(rounds):
        text = f"Writer {name} lesson {i}."
        reply = lib.with_name(f"reply-{name}.txt")
        reply.write_text(json.dumps([{"option": "add", "experience": text}]))
        result = runner.invoke(app, ["library", "apply", str(lib), str(reply)])
        if result.exit_code == 0 and "version" in result.output and "->" in result.output:
            print(text, flush=True)
""")


def test_two_concurrent_writers_lose_no_reported_success(tmp_path: Path) -> None:
    lib = _library(tmp_path)
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    writers = [
        subprocess.Popen(
            [sys.executable, str(script), str(lib), name, "50"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
            cwd=PROJECT,
        )
        for name in ("a", "b")
    ]
    reported = []
    for writer in writers:
        out, err = writer.communicate(timeout=280)
        assert writer.returncode == 0, err
        reported += out.splitlines()
    assert len(reported) == 100
    library = Library.load(lib)
    kept = {e.text for e in library.experiences}
    assert set(reported) <= kept, f"{len(set(reported) - kept)} reported successes were lost"
    assert library.version == 100 and History.for_library(lib).versions()[-1] == 100


def test_a_held_lock_makes_the_second_writer_wait_then_fail_clearly(tmp_path: Path) -> None:
    lib = _library(tmp_path)
    with FileLock(str(lib) + ".lock"):  # another process's lock (flock is per open file, so this conflicts)
        with pytest.raises(LockTimeoutError, match="being changed by another process"):
            with locked(lib, timeout_s=0.2):
                pass
    with locked(lib, timeout_s=0.2):
        pass


# -- defect 8: saving a file reset its mode to 0600 --------------------------------------------------------
def test_atomic_replace_keeps_the_file_mode(tmp_path: Path) -> None:
    target = tmp_path / "metrics.json"
    target.write_text("{}")
    target.chmod(0o644)
    atomic_write_text(target, '{"a": 1}')
    assert oct(target.stat().st_mode & 0o777) == oct(0o644)
    target.chmod(0o640)
    atomic_write_text(target, '{"a": 2}')
    assert oct(target.stat().st_mode & 0o777) == oct(0o640)
    fresh = tmp_path / "state.json"
    old_umask = os.umask(0o022)
    try:
        atomic_write_text(fresh, "{}")
    finally:
        os.umask(old_umask)
    assert oct(fresh.stat().st_mode & 0o777) == oct(0o644)


# -- defect 4: `learn --resume` beside a live run was not refused ------------------------------------------
def test_resume_beside_a_live_run_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text('{"problem": "1+1?", "answer": "2"}\n')
    out = tmp_path / "run"
    config = LearnConfig(data=str(data), out=str(out), dedup=False)
    first = RunDir(out)
    first.start(config)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom filelock import FileLock\n"
            f"lock = FileLock({str(out / 'run.lock')!r}); lock.acquire()\nprint('held', flush=True)\n"
            "time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    first.release()
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match="in use by another live `tfgrpo learn` process"):
            RunDir(out).start(config.model_copy(update={"resume": True}))
    finally:
        holder.kill()
        holder.wait()
    second = RunDir(out)
    assert second.start(config.model_copy(update={"resume": True})).completed_step == 0
    second.release()


def test_a_live_run_holds_its_lock_until_learn_returns(tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text('{"problem": "1+1?", "answer": "2"}\n')
    out = tmp_path / "run"
    run = RunDir(out)
    run.start(LearnConfig(data=str(data), out=str(out), dedup=False))
    with pytest.raises(ConfigError, match="in use"):
        RunDir(out).start(LearnConfig(data=str(data), out=str(out), dedup=False, resume=True))
    run.release()


def test_resume_removes_temp_files_a_killed_run_left(tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text('{"problem": "1+1?", "answer": "2"}\n')
    out = tmp_path / "run"
    config = LearnConfig(data=str(data), out=str(out), dedup=False)
    run = RunDir(out)
    run.start(config)
    run.release()
    left = [
        out / ".state.json.x1.tmp",
        out / ".metrics.json.x2.tmp",
        out / "steps" / "0001" / ".library.json.x3.tmp",
        out / "library.history" / "snapshots" / ".v0001.json.x4.tmp",
    ]
    for temp in left:
        temp.parent.mkdir(parents=True, exist_ok=True)
        temp.write_text("x" * 1000)
    resumed = RunDir(out)
    resumed.start(config.model_copy(update={"resume": True}))
    resumed.release()
    assert _temp_files(out) == []
