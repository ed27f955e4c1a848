"""Test-set lockout: learn refuses data that shares problems with a test set (by id or by normalised text)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from tests.helpers.learn_world import World, write_problems
from tfgrpo.cli.app import main
from tfgrpo.core.datasets import load_dataset_rows
from tfgrpo.core.lockout import TestSetOverlapError, check_no_test_overlap, find_test_overlap, text_hash
from tfgrpo.learn.config import LearnConfig
from tfgrpo.learn.loop import learn
from tfgrpo.llm.backends.scripted import ScriptedBackend
from tfgrpo.llm.factory import build_client

pytestmark = pytest.mark.timeout(120)


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture()
def aime_text() -> str:
    return load_dataset_rows("aime24")[0].problem


def test_text_hash_ignores_case_spacing_and_punctuation():
    assert text_hash("What is  17+25 ?") == text_hash("what is 17 + 25")
    assert text_hash("What is 17+25?") != text_hash("What is 17+26?")


def test_overlap_by_id_and_by_text(tmp_path, aime_text):
    data = write_rows(
        tmp_path / "train.jsonl",
        [
            {"id": "aime2024-I-01", "problem": "A different text entirely.", "answer": "1"},  # same id
            {"id": "mine-2", "problem": "  " + aime_text.upper() + "  ", "answer": "204"},  # same text, other id
            {"id": "mine-3", "problem": "What is 17+25?", "answer": "42"},
        ],
    )
    problems = load_dataset_rows(str(data))
    overlaps = find_test_overlap({"--data": problems}, {"aime24": load_dataset_rows("aime24")})
    assert [(o.data_id, o.test_id, o.by) for o in overlaps] == [
        ("aime2024-I-01", "aime2024-I-01", "id"),
        ("mine-2", "aime2024-I-01", "text"),
    ]
    with pytest.raises(
        TestSetOverlapError, match=r"shares 2 problem\(s\) with the test set\(s\) aime24.*--allow-test-overlap"
    ):
        check_no_test_overlap({"--data": problems}, {"aime24": load_dataset_rows("aime24")})


def test_generated_ids_are_not_compared(tmp_path):
    a = load_dataset_rows(str(write_rows(tmp_path / "a.jsonl", [{"problem": "What is 1+2?", "answer": "3"}])))
    b = load_dataset_rows(str(write_rows(tmp_path / "b.jsonl", [{"problem": "Name a prime.", "answer": "2"}])))
    assert a[0].id == b[0].id == "row-0000"
    assert find_test_overlap({"a": a}, {"b": b}) == []


def learn_config(tmp_path: Path, data: Path, **settings) -> LearnConfig:
    return LearnConfig(
        data=str(data),
        out=str(tmp_path / "run"),
        dedup=False,
        llm={"max_retries": 0},
        group_size=2,
        epochs=1,
        **settings,
    )


def test_learn_refuses_a_bundled_benchmark_and_a_declared_test_set(tmp_path, aime_text):
    on_aime = write_rows(tmp_path / "aime_copy.jsonl", [{"id": "x1", "problem": aime_text, "answer": "204"}])
    with pytest.raises(TestSetOverlapError, match="aime24"):
        learn(learn_config(tmp_path, on_aime))
    train = write_problems(tmp_path / "train.jsonl", [(17, 25), (30, 41)])
    test = write_problems(tmp_path / "test.jsonl", [(30, 41), (2, 3)])  # q30_41 in both: an id match
    with pytest.raises(TestSetOverlapError, match=r"q30_41=.*test.jsonl:q30_41 \(by id\)"):
        learn(learn_config(tmp_path, train, test_data=[str(test)]))
    with pytest.raises(TestSetOverlapError, match="--val-data"):
        learn(
            learn_config(
                tmp_path, write_problems(tmp_path / "ok.jsonl", [(5, 6)]), val_data=str(test), test_data=[str(test)]
            )
        )
    assert not (tmp_path / "run" / "state.json").exists()  # refused before anything was written


def test_learn_cli_prints_one_line_and_the_override_runs(tmp_path, aime_text, capsys):
    on_aime = write_rows(tmp_path / "aime_copy.jsonl", [{"id": "x1", "problem": aime_text, "answer": "204"}])
    with pytest.raises(SystemExit) as exit_info:
        main(["learn", "--data", str(on_aime), "--out", str(tmp_path / "cli")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --data") and "aime24" in err and len(err.splitlines()) == 1

    train = write_problems(tmp_path / "train.jsonl", [(17, 25), (30, 41)])
    test = write_problems(tmp_path / "test.jsonl", [(30, 41)])
    config = learn_config(tmp_path, train, test_data=[str(test)], allow_test_overlap=True)
    client = build_client(
        config.llm, backends=[ScriptedBackend(World().respond)], cache_path=Path(config.out) / "cache.sqlite"
    )
    console = Console(file=io.StringIO(), width=400)
    result = learn(config, client=client, console=console)
    assert result.status == "completed"
    assert "shares 1 problem(s) with test sets (allowed by --allow-test-overlap)" in console.file.getvalue()
