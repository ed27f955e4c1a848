"""Config and data inputs that used to be accepted silently or blew up: YAML alias bombs, duplicate keys in
YAML and in JSON rows. Each ends in one clear line and a non-zero exit, and nothing is written."""

from __future__ import annotations

import json

import pytest

from tests.helpers.cli import run_cli
from tfgrpo.core.config import MAX_YAML_ALIASES, ConfigError, load_yaml_text, read_yaml
from tfgrpo.core.datasets import load_dataset_rows

# Nine levels of anchors, nine aliases each: 9^9 leaves once expanded (the audit's bomb, grown).
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)
)


@pytest.mark.timeout(10)
def test_an_alias_bomb_is_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match=f"more than {MAX_YAML_ALIASES} YAML aliases"):
        load_yaml_text(BOMB)
    config = tmp_path / "bomb.yaml"
    config.write_text(
        "agent:\n  tool_options:\n    python:\n" + "".join("      " + line + "\n" for line in BOMB.splitlines())
    )
    out = tmp_path / "run"
    assert run_cli("learn", "--config", config, "--data", "easy_train", "--out", out) != 0
    assert not out.exists()


def test_a_few_aliases_still_work():
    data = load_yaml_text("base: &base {temperature: 0.6}\nrollout: *base\nstage: *base\n")
    assert data["rollout"] == data["stage"] == {"temperature": 0.6}


def test_a_duplicate_yaml_key_names_the_key_and_both_lines(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("epochs: 2\ngroup_size: 4\nepochs: 3\n")
    with pytest.raises(ConfigError, match=r"line 3: duplicate key 'epochs' \(first at line 1\)"):
        read_yaml(path)
    nested = "llm:\n  model: a\n  model: b\n"
    with pytest.raises(ConfigError, match="line 3: duplicate key 'model'"):
        load_yaml_text(nested)


def test_a_duplicate_key_in_a_json_row_is_refused_with_its_line(tmp_path):
    rows = tmp_path / "rows.jsonl"
    good = {"id": "a", "problem": "1+1?", "answer": "2"}
    rows.write_text(json.dumps(good) + "\n" + '{"id": "b", "problem": "2+2?", "answer": "4", "answer": "5"}\n')
    with pytest.raises(Exception, match=r"rows.jsonl:2: duplicate key 'answer'"):
        load_dataset_rows(str(rows))


@pytest.mark.parametrize(
    "args",
    [
        ("--timeout", "inf"),
        ("--timeout", "nan"),
        ("--config", "TIMEOUT_YAML"),
    ],
)
def test_an_infinite_or_nan_setting_is_one_line_not_an_overflow(tmp_path, capsys, args):
    if args[1] == "TIMEOUT_YAML":
        config = tmp_path / "inf.yaml"
        config.write_text("llm:\n  timeout_s: .inf\n")
        args = ("--config", config)
    out = tmp_path / "run"
    assert run_cli("learn", "--data", "easy_train", "--out", out, *args) != 0
    err = capsys.readouterr().err
    assert "timeout_s: Input should be a finite number" in err and "Traceback" not in err
    assert not out.exists()


def _non_utf8_config(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"epochs: 2\n# caf\xe9\n")
    return ("--config", path), "line 2, column 6: byte 0xe9 is not valid UTF-8"


def _out_is_a_file(tmp_path):
    path = tmp_path / "a-file"
    path.write_text("not a directory")
    return ("--out", path), "is a file; a learn run needs a directory"


@pytest.mark.parametrize(
    "case",
    [
        lambda tmp_path: (("--tools", "nonexistent_tool"), "unknown tool 'nonexistent_tool'"),
        _non_utf8_config,
        _out_is_a_file,
    ],
    ids=["unknown-tool", "non-utf8-config", "out-is-a-file"],
)
def test_bad_learn_inputs_end_in_one_line_and_write_nothing(tmp_path, capsys, case):
    args, message = case(tmp_path)
    out = tmp_path / "run"
    if "--out" not in args:
        args = (*args, "--out", out)
    assert run_cli("learn", "--data", "easy_train", *args) != 0
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) <= 3
    assert not out.exists()
