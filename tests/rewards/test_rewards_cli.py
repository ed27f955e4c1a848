"""`tfgrpo score`: rows come back with reward and extracted; malformed rows are named by line, the rest scored."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tfgrpo.cli.app import main

ROWS = [
    '{"id": 1, "completion": "so \\\\boxed{073}", "answer": "73"}',
    '{"id": 2, "completion": "Answer: 5", "answer": "500"}',
    "this is not json",
    '{"id": 4, "answer": "1"}',
    '{"id": 5, "completion": [{"role": "assistant", "content": "\\\\boxed{\\\\frac12}"}], "answer": "0.5"}',
    "[1, 2]",
    "",
    '{"id": 8, "completion": "\\\\boxed{4}"}',
]


@pytest.fixture()
def input_file(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(ROWS) + "\n", encoding="utf-8")
    return path


def run(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
        raise SystemExit(0)
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out, captured.err


@pytest.mark.timeout(60)
def test_score_to_stdout_reports_malformed_lines(input_file, capsys):
    code, out, err = run(["score", "--reward", "math", str(input_file)], capsys)
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["id"], r["reward"], r["extracted"]) for r in rows] == [
        (1, 1.0, "073"),
        (2, 0.0, "5"),
        (5, 1.0, "\\frac12"),
    ]
    assert all("reason" in r for r in rows)
    assert code == 1
    flat = " ".join(err.split())
    for line_number in (3, 4, 6, 8):
        assert f"in.jsonl:{line_number}:" in flat
    assert "missing key 'answer'" in flat and "missing key 'completion'" in flat
    assert "3 scored" in flat and "4 malformed" in flat


@pytest.mark.timeout(60)
def test_score_to_file_with_custom_keys(tmp_path, capsys):
    source = tmp_path / "custom.jsonl"
    source.write_text(
        json.dumps({"text": "\\boxed{12}", "gold": "12"})
        + "\n"
        + json.dumps({"text": "\\boxed{11}", "gold": "12"})
        + "\n",
        encoding="utf-8",
    )
    out = tmp_path / "out.jsonl"
    code, stdout, err = run(
        ["score", "-r", "math", str(source), "--out", str(out), "--completion-key", "text", "--answer-key", "gold"],
        capsys,
    )
    assert code == 0 and stdout == ""
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["reward"] for r in rows] == [1.0, 0.0] and rows[0]["gold"] == "12"
    assert "mean reward 0.5000" in " ".join(err.split())


@pytest.mark.timeout(60)
def test_score_with_reward_params_and_format_reward_needs_no_answer(tmp_path, capsys):
    source = tmp_path / "f.jsonl"
    source.write_text(json.dumps({"completion": "<think>hm</think> \\boxed{1}"}) + "\n", encoding="utf-8")
    code, out, _ = run(["score", "--reward", "format", str(source)], capsys)
    assert code == 0 and json.loads(out)["reward"] == 1.0
    numeric = tmp_path / "n.jsonl"
    numeric.write_text(json.dumps({"completion": "\\boxed{99}", "answer": "100"}) + "\n", encoding="utf-8")
    _, out, _ = run(["score", "--reward", "numeric", "--param", "rel_tol=0.02", str(numeric)], capsys)
    assert json.loads(out)["reward"] == 1.0


def test_user_errors_are_one_line(tmp_path, capsys):
    code, _, err = run(["score", str(tmp_path / "missing.jsonl")], capsys)
    assert code == 2 and "input file not found" in err and "Traceback" not in err
    (tmp_path / "x.jsonl").write_text("{}\n", encoding="utf-8")
    code, _, err = run(["score", "--reward", "bogus", str(tmp_path / "x.jsonl")], capsys)
    assert code == 2 and "unknown reward 'bogus'" in err
    code, _, err = run(["score", "--param", "novalue", str(tmp_path / "x.jsonl")], capsys)
    assert code == 2 and "KEY=VALUE" in err


@pytest.mark.timeout(60)
def test_console_entry_point_end_to_end(input_file, tmp_path):
    out = tmp_path / "scored.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "tfgrpo", "score", "--reward", "math", str(input_file), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert len(out.read_text(encoding="utf-8").splitlines()) == 3
    assert "Traceback" not in done.stderr
