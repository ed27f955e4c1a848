"""Issue 43: `--resume` refuses a run whose saved config.yaml was edited, naming the keys, through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.helpers.cli import run_cli
from tests.helpers.learn_world import World, WorldServer, write_problems

pytestmark = pytest.mark.timeout(120)


def _first_run(server: WorldServer, out: Path) -> None:
    data = write_problems(out.parent / "train.jsonl", [(1, 2), (3, 4), (5, 6), (7, 8)])
    args = server.learn_args(data, out, "-G", "2", "--epochs", "1", "--batch-size", "2", "--dedup", "off")
    assert run_cli(*args) == 0


def _edit_group_size(out: Path, group_size: int) -> None:
    config = yaml.safe_load((out / "config.yaml").read_text(encoding="utf-8"))
    config["group_size"] = group_size
    (out / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")


def test_resume_refuses_an_edited_config_yaml_naming_the_key(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    with WorldServer(World()) as server:
        _first_run(server, out)
        state_before = (out / "state.json").read_bytes()
        _edit_group_size(out, 4)
        capsys.readouterr()
        code = run_cli("learn", "--out", out, "--resume", "--epochs", "2", "--api-key", "k")
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.count("\n") == 0 and err.startswith("error:") and "group_size" in err
    assert (out / "state.json").read_bytes() == state_before  # nothing ran with the mixed settings


def test_allow_config_change_resumes_an_edited_config_and_records_the_new_settings(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with WorldServer(World()) as server:
        _first_run(server, out)
        _edit_group_size(out, 4)
        code = run_cli("learn", "--out", out, "--resume", "--epochs", "2", "--api-key", "k", "--allow-config-change")
        assert code == 0
        state = json.loads((out / "state.json").read_text(encoding="utf-8"))
        assert state["settings"]["group_size"] == 4
        saved = yaml.safe_load((out / "config.yaml").read_text(encoding="utf-8"))
        assert saved["allow_config_change"] is False  # the permission is for that one resume, not the next
        # the next plain resume is compared with the settings it last ran with: nothing changed, no refusal
        assert run_cli("learn", "--out", out, "--resume", "--api-key", "k") == 0
