"""Data builders: rollouts -> SFT / preference pairs / KTO / RL prompts; problems -> RL prompts; bad input errors."""

from __future__ import annotations

import json

import pytest

from tests.helpers.finetune_rows import rollout
from tfgrpo.finetune import data
from tfgrpo.finetune.errors import FinetuneDataError
from tfgrpo.finetune.run import build_dataset_rows


@pytest.fixture()
def rollouts():
    rows = [
        rollout("a", 0, 1.0),
        rollout("a", 1, 0.0),
        rollout("a", 2, 1.0),
        rollout("a", 3, 0.0),
        rollout("b", 0, 0.0),
        rollout("b", 1, 0.0),  # all wrong: no pair, no SFT row
        rollout("c", 0, 1.0),
        rollout("c", 1, None),
        rollout("c", 2, 0.0, error="timeout"),
        rollout("a", 0, 0.0, step=1),
    ]  # same query, other step: a different group
    return rows


def test_sft_keeps_only_correct_distinct_rollouts_with_plain_prompt(rollouts):
    rows = data.sft_examples(rollouts + [rollout("a", 0, 1.0)])  # a duplicate completion
    assert len(rows) == 3
    assert all(r["completion"][0]["content"].endswith("\\boxed{4}") for r in rows)
    prompt = rows[0]["prompt"]
    assert len(prompt) == 1 and prompt[0]["role"] == "user" and "Problem a" in prompt[0]["content"]
    assert "\\boxed{}" in prompt[0]["content"]  # the jinja template's instruction
    with_context = data.sft_examples(rollouts, prompt_source="messages")
    assert with_context[0]["prompt"][0]["content"] == "[1]. experience"


def test_preference_pairs_stay_within_one_group(rollouts):
    pairs = data.preference_pairs(rollouts)
    assert len(pairs) == 4  # group (a, step 0): 2 correct x 2 wrong; (b) none; (c) wrong one errored; (a, 1) none
    for pair in pairs:
        chosen, rejected = pair["chosen"][0]["content"], pair["rejected"][0]["content"]
        assert chosen.startswith("a-0-") and rejected.startswith("a-0-")
        assert chosen.endswith("{4}") and rejected.endswith("{5}")
    assert len(data.preference_pairs(rollouts, max_pairs_per_group=1)) == 1


def test_kto_labels_follow_reward_and_skip_unscored(rollouts):
    rows = data.kto_examples(rollouts)
    assert len(rows) == 8  # the None reward and the errored rollout are dropped
    assert sum(r["label"] for r in rows) == 3


def test_prompts_from_rollouts_and_problems(tmp_path, rollouts):
    assert [r["answer"] for r in data.prompt_examples(rollouts)] == ["4", "4", "4"]
    problems = tmp_path / "p.jsonl"
    problems.write_text('{"id": 1, "problem": "1+1?", "answer": 2}\n\n{"id": 2, "problem": "2+2?", "answer": "4"}\n')
    rows = build_dataset_rows("prompts", problems, {})
    assert rows[0] == {"prompt": [{"role": "user", "content": data.render_prompt("1+1?")}], "answer": "2"}
    assert len(rows) == 2


def test_run_directory_and_kinds(tmp_path, rollouts):
    (tmp_path / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rollouts))
    assert len(build_dataset_rows("pairs", tmp_path, {})) == 4
    assert len(build_dataset_rows("sft", tmp_path, {"success_threshold": 0.5})) == 3
    problems = tmp_path / "p.jsonl"
    problems.write_text('{"problem": "x", "answer": "1"}\n')
    with pytest.raises(FinetuneDataError, match="no completions"):
        build_dataset_rows("sft", problems, {})


def test_errors_name_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem": "x", "answer": "1"}\n{oops\n')
    with pytest.raises(FinetuneDataError, match=r"bad.jsonl:2: not valid JSON"):
        build_dataset_rows("prompts", bad, {})
    with pytest.raises(FinetuneDataError, match="not found"):
        build_dataset_rows("prompts", tmp_path / "missing.jsonl", {})
    with pytest.raises(FinetuneDataError, match="rollouts.jsonl"):
        build_dataset_rows("sft", tmp_path, {})
    only_wrong = tmp_path / "wrong.jsonl"
    only_wrong.write_text(json.dumps(rollout("a", 0, 0.0)) + "\n")
    with pytest.raises(FinetuneDataError, match="no usable sft examples"):
        build_dataset_rows("sft", only_wrong, {})


def test_bundled_dataset_names_give_rl_prompts(tmp_path, monkeypatch):
    from tfgrpo.core.datasets import load_dataset_rows

    rows = build_dataset_rows("prompts", "math_l5_train200", {})
    gold = load_dataset_rows("math_l5_train200")
    assert len(rows) == 200 and [r["answer"] for r in rows] == [p.answer for p in gold]
    assert rows[0]["prompt"] == [{"role": "user", "content": data.render_prompt(gold[0].problem)}]
    assert len(build_dataset_rows("prompts", "dapo100", {})) == 100  # the bundled row limit applies
    with pytest.raises(FinetuneDataError, match="only the RL methods"):
        build_dataset_rows("sft", "easy", {})
    with pytest.raises(FinetuneDataError, match="nor a bundled dataset: .*math_l5_train200"):
        build_dataset_rows("prompts", "no_such_set", {})
    monkeypatch.chdir(tmp_path)  # a local file of that name wins over the bundled set
    (tmp_path / "easy").write_text(json.dumps({"problem": "local", "answer": "1"}) + "\n")
    assert [r["answer"] for r in build_dataset_rows("prompts", "easy", {})] == ["1"]
