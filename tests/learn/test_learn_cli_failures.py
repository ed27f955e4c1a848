"""learn's failures through the real command line (issue 43): one line each, and the run stays resumable.

- a disk that fills mid-run: one `error:` line naming the file and --resume, state.json still the last
  completed step, and `--resume` finishes with the rollouts an uninterrupted run has;
- 200,000 rows without --limit: refused at the memory budget, after reading only the rows within it;
- RUN/config.yaml edited before `--resume` (G=2 -> 4; here a finished run given a second epoch): refused, naming the key, unless
  --allow-config-change, which state.json then records.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

import tfgrpo.learn.rundir as rundir
from tests.helpers.cli import run_cli
from tests.helpers.learn_world import World, WorldServer, read_jsonl, write_problems

PAIRS = [(1, 2), (3, 4), (5, 6), (7, 8)]
OPTIONS = ("-G", "2", "--epochs", "1", "--batch-size", "1", "--dedup", "off")


def _state(out: Path) -> dict:
    return json.loads((out / "state.json").read_text(encoding="utf-8"))


@pytest.mark.timeout(180)
def test_disk_full_mid_run_is_one_line_and_the_run_resumes(tmp_path: Path, capsys, monkeypatch) -> None:
    data = write_problems(tmp_path / "train.jsonl", PAIRS)
    real_append = rundir.append_lines
    appended: list[Path] = []

    def fill_the_disk_mid_run(path, lines):  # a later step's log append finds the disk full
        appended.append(Path(path))
        if len(appended) == 1 + 2 * (1 + len(rundir.STAGE_LOGS)):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_append(path, lines)

    with WorldServer(World()) as server:
        monkeypatch.setattr(rundir, "append_lines", fill_the_disk_mid_run)
        code = run_cli(*server.learn_args(data, tmp_path / "full", *OPTIONS))
        monkeypatch.setattr(rundir, "append_lines", real_append)
        err = capsys.readouterr().err
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert code == 2 and "Traceback" not in err and len(errors) == 1, err
        assert "No space left on device" in errors[0] and "--resume" in errors[0]
        assert 1 <= _state(tmp_path / "full")["completed_step"] < len(PAIRS)  # the steps before it, whole

        assert run_cli(*server.learn_args(data, tmp_path / "full", "--resume", *OPTIONS)) == 0
        assert run_cli(*server.learn_args(data, tmp_path / "whole", *OPTIONS)) == 0
    capsys.readouterr()
    resumed, whole = (read_jsonl(tmp_path / name / "rollouts.jsonl") for name in ("full", "whole"))
    assert len(resumed) == len(whole) == 2 * len(PAIRS)
    assert [r["problem"] for r in resumed] == [r["problem"] for r in whole]
    assert _state(tmp_path / "full")["status"] == "completed"


@pytest.mark.timeout(180)
def test_resume_refuses_an_edited_config_naming_the_key(tmp_path: Path, capsys) -> None:
    data = write_problems(tmp_path / "train.jsonl", PAIRS)
    out = tmp_path / "run"
    with WorldServer(World()) as server:
        assert run_cli(*server.learn_args(data, out, *OPTIONS)) == 0
        capsys.readouterr()
        done = _state(out)["completed_step"]
        config = out / "config.yaml"
        config.write_text(config.read_text(encoding="utf-8").replace("group_size: 2", "group_size: 4"))
        resume = ("learn", "--out", str(out), "--resume", "--epochs", "2", "--api-key", "k")

        requests = len(server.bodies)
        assert run_cli(*resume) == 2
        err = capsys.readouterr().err
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "group_size 2 -> 4" in errors[0] and "--allow-config-change" in errors[0], err
        assert _state(out)["completed_step"] == done and len(server.bodies) == requests

        assert run_cli(*resume, "--allow-config-change") == 0
        state = _state(out)
        assert state["status"] == "completed"
        assert state["config_changes"] == [{"from_step": done + 1, "changes": {"group_size": {"old": 2, "new": 4}}}]
        assert "allow_config_change: false" in config.read_text(encoding="utf-8")  # the next resume checks again


@pytest.mark.timeout(120)
def test_a_200000_row_dataset_stops_at_the_memory_budget(tmp_path: Path, capsys) -> None:
    data = write_problems(tmp_path / "big.jsonl", [(i, i + 1) for i in range(200_000)])
    code = run_cli("learn", "--data", data, "--out", tmp_path / "run", "--api-key", "k", "--backend", "openai")
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "memory budget of 512 MB" in errors[0], err
    held = int(errors[0].split("(")[1].split(" rows")[0].replace(",", ""))
    assert 50_000 < held < 70_000  # 512 MB at ~8 KB a row: streamed, never all 200,000 held
    assert not (tmp_path / "run").exists()
