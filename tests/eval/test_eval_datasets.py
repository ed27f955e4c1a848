"""Bundled datasets load by name with the right sizes; bad files fail naming file, line and key."""

from __future__ import annotations

import json

import pytest

from tfgrpo.core.datasets import BUNDLED, Problem, list_bundled, load_dataset_rows
from tfgrpo.core.errors import DatasetError, EvalError


@pytest.mark.parametrize(
    "name, size, first_id",
    [
        ("aime24", 30, "aime2024-I-01"),
        ("aime25", 30, "aime2025-I-01"),
        ("amc23", 40, None),
        ("dapo100", 100, None),
        ("math_l5_train200", 200, None),
        ("easy", 16, "easy-01"),
        ("easy_train", 24, "easy-train-01"),
    ],
)
def test_bundled_sets_load_with_their_sizes(name, size, first_id):
    rows = load_dataset_rows(name)
    assert len(rows) == size == BUNDLED[name].size
    assert len({row.id for row in rows}) == size
    assert all(isinstance(row, Problem) and row.problem.strip() and row.answer for row in rows)
    if first_id:
        assert rows[0].id == first_id


def test_bundled_answers_are_integers():
    for name in ("aime24", "aime25", "easy", "easy_train"):
        for row in load_dataset_rows(name):
            assert row.answer.lstrip("-").isdigit(), (name, row.id, row.answer)
    easy = {row.problem: row.answer for row in load_dataset_rows("easy")}
    assert easy["What is 7 + 5?"] == "12"


def test_the_quickstart_trains_on_problems_it_does_not_evaluate_on():
    evaluated = {row.problem for row in load_dataset_rows("easy")}
    assert not evaluated & {row.problem for row in load_dataset_rows("easy_train")}


def test_list_bundled_and_limit():
    assert [d.name for d in list_bundled()] == [
        "aime24",
        "aime25",
        "amc23",
        "dapo100",
        "math_l5_train200",
        "easy",
        "easy_train",
    ]
    assert len(load_dataset_rows("aime24", limit=5)) == 5
    assert len(load_dataset_rows("dapo100", limit=500)) == 100  # the bundled cut still applies


def test_unknown_name_lists_the_bundled_ones():
    with pytest.raises(EvalError, match="aime24.*easy"):
        load_dataset_rows("aime23")


def _write_lines(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_jsonl_with_custom_keys_extra_columns_and_generated_ids(tmp_path):
    path = _write_lines(
        tmp_path / "custom.jsonl",
        [
            json.dumps({"question": "1+1?", "solution": 2, "level": 1}),
            "",
            json.dumps({"question": "2+2?", "solution": 4.0, "level": 2}),
        ],
    )
    rows = load_dataset_rows(path, problem_key="question", answer_key="solution")
    assert [(r.id, r.answer, r.extra) for r in rows] == [
        ("row-0000", "2", {"level": 1}),
        ("row-0001", "4", {"level": 2}),
    ]


def test_missing_key_names_file_line_and_key(tmp_path):
    path = _write_lines(
        tmp_path / "bad.jsonl",
        [
            json.dumps({"id": "a", "problem": "x", "answer": "1"}),
            json.dumps({"id": "b", "problem": "y", "answer": "2"}),
            json.dumps({"id": "c", "problem": "z"}),
        ],
    )
    with pytest.raises(DatasetError) as info:
        load_dataset_rows(path)
    assert f"{path}:3" in str(info.value) and "'answer'" in str(info.value)


@pytest.mark.parametrize(
    "line, fragment",
    [
        ('{"id": "a", "problem": "x", "answer": ', "not valid JSON"),
        ('["a", "b"]', "expected a JSON object"),
        ('{"id": "a", "problem": "", "answer": "1"}', "non-empty string"),
        ('{"id": "a", "problem": "x", "answer": null}', "'answer' is empty"),
        ('{"id": "a", "problem": "x", "answer": true}', "string or a number"),
    ],
)
def test_malformed_rows(tmp_path, line, fragment):
    path = _write_lines(tmp_path / "bad.jsonl", [json.dumps({"id": "ok", "problem": "p", "answer": "1"}), line])
    with pytest.raises(DatasetError, match=fragment) as info:
        load_dataset_rows(path)
    assert f"{path}:2" in str(info.value)


def test_duplicate_ids_are_an_error(tmp_path):
    row = json.dumps({"id": "same", "problem": "p", "answer": "1"})
    path = _write_lines(tmp_path / "dup.jsonl", [row, row])
    with pytest.raises(DatasetError, match=r"dup.jsonl:2: duplicate id 'same' \(first seen at .*dup.jsonl:1\)"):
        load_dataset_rows(path)


def test_empty_file_and_unsupported_type(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="no rows"):
        load_dataset_rows(tmp_path / "empty.jsonl")
    (tmp_path / "data.txt").write_text("hello", encoding="utf-8")
    with pytest.raises(DatasetError, match="unsupported file type"):
        load_dataset_rows(tmp_path / "data.txt")


def test_csv_and_parquet_through_hf_datasets(tmp_path):
    csv_path = tmp_path / "set.csv"
    csv_path.write_text("problem,answer,topic\nWhat is 2+3?,5,add\nWhat is 2*3?,6.0,mul\n", encoding="utf-8")
    rows = load_dataset_rows(csv_path)
    assert [(r.id, r.answer, r.extra["topic"]) for r in rows] == [("row-0000", "5", "add"), ("row-0001", "6", "mul")]

    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet_path = tmp_path / "set.parquet"
    pq.write_table(pa.table({"id": ["q1", "q2"], "problem": ["a?", "b?"], "answer": [1, 2]}), parquet_path)
    assert [(r.id, r.answer) for r in load_dataset_rows(parquet_path)] == [("q1", "1"), ("q2", "2")]

    json_path = tmp_path / "set.json"
    json_path.write_text(json.dumps([{"problem": "a?", "answer": "1"}]), encoding="utf-8")
    assert load_dataset_rows(json_path)[0].answer == "1"


def test_csv_bad_row_names_the_row(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("problem,answer\nfine,1\n,2\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"bad.csv: row 2: key 'problem'"):
        load_dataset_rows(path)
