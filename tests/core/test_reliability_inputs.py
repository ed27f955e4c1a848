"""Bounded, decoded inputs: bad bytes, deep nesting and oversized rows give one clear line naming the
file and line (never a traceback); a boolean is not a number in a config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tfgrpo.cli.app import main
from tfgrpo.core.config import ConfigError, build_config
from tfgrpo.core.datasets import load_dataset_rows
from tfgrpo.core.errors import DatasetError
from tfgrpo.core.textfile import MAX_ROW_BYTES
from tfgrpo.eval.runner import EvalConfig, evaluate
from tfgrpo.experiences import Library
from tfgrpo.experiences.errors import ImportFormatError, LibraryFileError
from tfgrpo.experiences.export import import_library
from tfgrpo.learn.config import LearnConfig

BAD_BYTES = b'{"version": 0, "experiences": [{"id": "G0", "text": "caf\xe9 \xff"}]}\n'


def _cli(capsys, *args: str) -> str:
    """Run a command through the real entry point; its one-line error (stderr)."""
    with pytest.raises(SystemExit) as info:
        main(list(args))
    assert info.value.code != 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith("error:") and err.count("\n") == 1, err
    return err


def test_non_utf8_library_names_file_line_and_byte(tmp_path: Path, capsys):
    path = tmp_path / "library.json"
    path.write_bytes(b"\n" + BAD_BYTES)
    with pytest.raises(LibraryFileError, match=r"library.json: line 2, column \d+: byte 0xe9 is not valid UTF-8"):
        Library.load(path)
    assert "not valid UTF-8" in _cli(capsys, "library", "show", str(path))


def test_non_utf8_reply_given_to_apply(tmp_path: Path, capsys):
    library = tmp_path / "library.json"
    library.write_text(json.dumps({"version": 0, "experiences": []}))
    reply = tmp_path / "reply.txt"
    reply.write_bytes(b'[{"option": "add", "experience": "\xff\xfe"}]')
    assert "reply.txt: line 1, column 35: byte 0xff is not valid UTF-8" in _cli(
        capsys, "library", "apply", str(library), str(reply)
    )


def test_non_utf8_import_and_dataset_and_score_inputs(tmp_path: Path, capsys):
    exported = tmp_path / "lessons.txt"
    exported.write_bytes(b"one lesson\n\xc3\x28 broken\n")
    with pytest.raises(ImportFormatError, match=r"lessons.txt: line 2, column 1: byte 0xc3"):
        import_library(exported)
    data = tmp_path / "data.jsonl"
    data.write_bytes(b'{"problem": "1+1", "answer": "2"}\n{"problem": "\x80", "answer": "1"}\n')
    with pytest.raises(DatasetError, match=r"data.jsonl:2: column 14: byte 0x80 is not valid UTF-8"):
        load_dataset_rows(data)
    assert "data.jsonl:2: column 14" in _cli(capsys, "score", "--reward", "exact", str(data))


def test_deeply_nested_library_is_a_clear_error_not_a_recursion_error(tmp_path: Path):
    path = tmp_path / "library.json"
    path.write_text('{"version": 0, "experiences": [' + "[" * 100_000 + "]" * 100_000 + "]}")
    with pytest.raises(LibraryFileError, match="nested too deeply"):
        Library.load(path)
    path.write_text('{"version": 0, "experiences": [], "x": ' + "[" * 100 + "]" * 100 + "}")
    with pytest.raises(LibraryFileError, match="nested 101 levels deep; the limit is 64"):
        Library.load(path)
    rows = tmp_path / "data.jsonl"
    rows.write_text('{"problem": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    with pytest.raises(DatasetError, match="data.jsonl:1: JSON nested too deeply"):
        load_dataset_rows(rows)


def test_a_duplicate_key_names_the_line_it_is_given_again(tmp_path: Path):
    """JSON lets a key repeat and readers keep the last; ours refuse it, naming the line of the repeat."""
    library = tmp_path / "library.json"
    library.write_text('{"version": 0, "experiences": [\n  {"id": "G0", "text": "a b",\n   "text": "c d"}]}')
    with pytest.raises(LibraryFileError, match=r"library.json: line 3: duplicate key 'text'"):
        Library.load(library)
    pretty = tmp_path / "set.json"  # a JSON array of rows, as an editor indents it
    pretty.write_text(
        '[\n  {"problem": "p", "answer": "1"},\n  {\n    "problem": "q",\n    "answer": "2",\n    "answer": "3"\n  }\n]'
    )
    with pytest.raises(DatasetError, match=r"set.json:6: duplicate key 'answer'"):
        load_dataset_rows(pretty)
    nested = tmp_path / "lines.json"  # JSON Lines in a .json file, a nested object repeating a key
    nested.write_text('{"problem": "p", "answer": "1"}\n{"problem": "q", "answer": "2", "meta": {"a": 1, "a": 2}}\n')
    with pytest.raises(DatasetError, match=r"lines.json:2: duplicate key 'a'"):
        load_dataset_rows(nested)


def test_oversized_dataset_row_is_refused_without_reading_it_whole(tmp_path: Path):
    data = tmp_path / "data.jsonl"
    data.write_text(
        '{"problem": "ok", "answer": "1"}\n'
        + json.dumps({"problem": "x" * (MAX_ROW_BYTES + 10), "answer": "2"})
        + "\n"
    )
    with pytest.raises(DatasetError, match=r"data.jsonl:2: row is longer than the limit of 1,048,576 bytes"):
        load_dataset_rows(data)


def test_a_boolean_is_not_a_number_in_yaml(tmp_path: Path):
    config = tmp_path / "learn.yaml"
    config.write_text("data: data.jsonl\ngroup_size: true\n")
    with pytest.raises(ConfigError, match="'group_size' must be a number, not true"):
        build_config(LearnConfig, config, {})
    config.write_text("data: data.jsonl\nllm:\n  timeout_s: false\n")
    with pytest.raises(ConfigError, match="'llm.timeout_s' must be a number, not false"):
        build_config(LearnConfig, config, {})
    config.write_text("data: data.jsonl\ngroup_size: 4\n")
    assert build_config(LearnConfig, config, {}).group_size == 4


def test_a_failed_eval_leaves_nothing_behind(tmp_path: Path):
    """A bad library (or dataset) fails before the first call: no config.yaml, no empty folder."""
    data = tmp_path / "data.jsonl"
    data.write_text('{"problem": "1+1?", "answer": "2"}\n')
    bad_library = tmp_path / "library.json"
    bad_library.write_bytes(BAD_BYTES)
    out = tmp_path / "eval-run"
    with pytest.raises(LibraryFileError):
        evaluate(EvalConfig(data=str(data), out=str(out), samples=1, library=str(bad_library)))
    assert not out.exists()
    bad_data = tmp_path / "bad.jsonl"
    bad_data.write_bytes(b"\xff\n")
    with pytest.raises(DatasetError):
        evaluate(EvalConfig(data=str(bad_data), out=str(out), samples=1))
    assert not out.exists()


def test_the_row_limit_is_configurable(tmp_path: Path):
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"problem": "y" * 3000, "answer": "1"}) + "\n")
    with pytest.raises(DatasetError, match="data.jsonl:1: row is longer than the limit of 2,048 bytes"):
        load_dataset_rows(data, max_row_bytes=2048)
    config = tmp_path / "eval.yaml"
    config.write_text(f"data: {data}\nout: {tmp_path / 'e'}\nmax_row_bytes: 2048\n")
    with pytest.raises(DatasetError, match="limit of 2,048 bytes"):
        evaluate(build_config(EvalConfig, config, {}))
    assert not (tmp_path / "e").exists()
    assert build_config(LearnConfig, None, {"data": str(data), "max_row_bytes": 4096}).max_row_bytes == 4096
