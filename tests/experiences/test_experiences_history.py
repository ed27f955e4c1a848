"""History: snapshots per version, append-only op log, diff, rollback, and crash-safe writes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tfgrpo.experiences import (
    AddOp,
    DeleteOp,
    ExperienceError,
    History,
    Library,
    ModifyOp,
    UnknownVersionError,
    apply_operations,
)
from tfgrpo.experiences.history import diff_libraries, read_jsonl

pytestmark = pytest.mark.timeout(120)
REPO = Path(__file__).resolve().parents[2]


def _run_steps(history: History) -> list[Library]:
    lib = Library.from_texts(["a one", "b two"])
    history.ensure_baseline(lib)
    versions = [lib]
    for step, ops in enumerate(
        [
            [AddOp(experience="c three")],
            [ModifyOp(id="G0", experience="a uno"), DeleteOp(id="G1"), DeleteOp(id="G9")],
            [AddOp(experience="d four")],
        ],
        start=1,
    ):
        result = apply_operations(versions[-1], ops, step=step)
        history.commit_result(result, step=step)
        versions.append(result.library)
    return versions


def test_snapshots_and_op_log(tmp_path: Path) -> None:
    history = History(tmp_path / "h")
    versions = _run_steps(history)
    assert history.versions() == [0, 1, 2, 3]
    for lib in versions:
        assert history.load(lib.version) == lib
    records = history.records()
    assert [(r["version"], r["kind"]) for r in records] == [
        (0, "baseline"),
        (1, "applied"),
        (2, "applied"),
        (2, "applied"),
        (2, "rejected"),
        (3, "applied"),
    ]
    assert records[4]["reason"] == "unknown id 'G9'" and records[4]["step"] == 2 and "time" in records[4]
    assert history.records(version=2)[0]["op"] == {"option": "modify", "id": "G0", "experience": "a uno"}


def test_op_log_is_append_only(tmp_path: Path) -> None:
    history = History(tmp_path / "h")
    _run_steps(history)
    before = history.ops_path.read_bytes()
    lib = history.latest()
    history.commit_result(apply_operations(lib, [AddOp(experience="e five")], step=4), step=4)
    after = history.ops_path.read_bytes()
    assert after.startswith(before) and len(after) > len(before)


def test_diff_between_any_two_versions(tmp_path: Path) -> None:
    history = History(tmp_path / "h")
    _run_steps(history)
    diff = history.diff(0, 3)
    assert [e.id for e in diff.added] == ["G2", "G3"]
    assert [e.id for e in diff.removed] == ["G1"]
    assert [(m.id, m.before, m.after) for m in diff.modified] == [("G0", "a one", "a uno")]
    text = diff.format()
    assert "- [G1]. b two" in text and "+ [G3]. d four" in text and "~ [G0]. a one" in text
    assert history.diff(2, 2).empty


def test_rollback_is_a_new_version_and_ids_stay_unique(tmp_path: Path) -> None:
    history = History(tmp_path / "h")
    versions = _run_steps(history)
    restored = history.rollback(1, current=versions[-1])
    assert restored.version == 4 and restored.ids == versions[1].ids
    assert history.versions() == [0, 1, 2, 3, 4] and history.records()[-1]["kind"] == "rollback"
    assert history.load(3) == versions[3]  # nothing was rewritten
    nxt = apply_operations(restored, [AddOp(experience="fresh")]).library
    assert nxt.ids[-1] == "G4"  # G3 existed in version 3: never handed out again


def test_unknown_version(tmp_path: Path) -> None:
    history = History(tmp_path / "h")
    _run_steps(history)
    with pytest.raises(UnknownVersionError, match="versions: 0, 1, 2, 3"):
        history.load(9)


def test_committing_a_different_library_under_an_existing_version_fails(tmp_path: Path) -> None:
    history = History(tmp_path / "h")
    versions = _run_steps(history)
    tampered = versions[1].model_copy(deep=True)
    tampered.experiences[0].text = "changed without a version bump"
    with pytest.raises(ExperienceError, match="already has a different library at version 1"):
        history.commit(tampered)


def test_torn_last_log_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "ops.jsonl"
    path.write_text('{"kind": "applied"}\n{"kind": "appl')
    assert read_jsonl(path) == [{"kind": "applied"}]


def test_for_library_convention(tmp_path: Path) -> None:
    assert History.for_library(tmp_path / "run" / "library.json").directory == tmp_path / "run" / "library.history"


def test_diff_libraries_directly() -> None:
    a = Library.from_texts(["x", "y"])
    b = apply_operations(a, [ModifyOp(id="G1", experience="why")]).library
    assert [m.id for m in diff_libraries(a, b).modified] == ["G1"]


# -- crash safety --------------------------------------------------------------------------------------
_SLOW_SAVER = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from tfgrpo.experiences import Library

    target, signal_file = Path(sys.argv[1]), Path(sys.argv[2])
    real_fsync = os.fsync

    def stalled_fsync(fd):
        # The new content is in the temporary file; stall here so the parent can kill us mid-save.
        signal_file.write_text("writing")
        time.sleep(60)

    os.fsync = stalled_fsync
    Library.from_texts([f"new lesson {i} " + "x" * 200 for i in range(2000)], task="new").save(target)
    """
)


def test_kill_during_save_leaves_the_old_file_intact(tmp_path: Path) -> None:
    target = tmp_path / "library.json"
    old = Library.from_texts(["old lesson one", "old lesson two"], task="old")
    old.save(target)
    old_bytes = target.read_bytes()
    signal_file = tmp_path / "started"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, "-c", _SLOW_SAVER, str(target), str(signal_file)], env=env)
    try:
        deadline = time.monotonic() + 60
        while not signal_file.exists():
            assert child.poll() is None, "the saver exited before it started writing"
            assert time.monotonic() < deadline
            time.sleep(0.05)
        temporaries = [p for p in tmp_path.iterdir() if p.name.startswith(".library.json.")]
        assert temporaries and temporaries[0].stat().st_size > 100_000  # the new content was being written
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    assert target.read_bytes() == old_bytes
    assert Library.load(target) == old


def test_failed_save_removes_its_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "library.json"
    Library.from_texts(["keep me"]).save(target)

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        Library.from_texts(["new"]).save(target)
    assert [p.name for p in tmp_path.iterdir()] == ["library.json"]
    assert Library.load(target).experiences[0].text == "keep me"
