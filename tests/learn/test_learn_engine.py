"""The Training-Free GRPO loop on a scripted backend: each test makes one rule of the algorithm visible."""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path

import pytest
from rich.console import Console

from tests.helpers.learn_runs import rollout_requests, run_learn
from tests.helpers.learn_world import World, read_jsonl, write_problems
from tfgrpo.learn.config import LearnConfig
from tfgrpo.learn.loop import learn, plan_steps
from tfgrpo.llm.backends.scripted import ScriptedBackend
from tfgrpo.llm.factory import build_client
from tfgrpo.rollout.agent import AgentConfig

pytestmark = pytest.mark.timeout(120)


def test_group_size_epochs_and_batches_are_respected(tmp_path):
    pairs = [(1, 2), (3, 4), (5, 6), (7, 8), (9, 10)]
    result, backend, config = run_learn(tmp_path, World(), pairs, group_size=3, epochs=2, batch_size=2)
    assert result.status == "completed"
    steps = result.metrics["steps"]
    assert [(s["epoch"], s["batch"], s["queries"]) for s in steps] == [
        (1, 1, 2),
        (1, 2, 2),
        (1, 3, 1),
        (2, 1, 2),
        (2, 2, 2),
        (2, 3, 1),  # the last batch is smaller
    ]
    samples = Counter()
    for request in rollout_requests(backend):
        problem = request.messages[-1].content.splitlines()[0]
        samples[problem, request.sample_offset // 3] += request.n
    assert set(samples.values()) == {3} and len(samples) == 5 * 2  # G samples per query per epoch
    # epoch 2 draws fresh samples: indices G..2G-1, so the cache does not replay epoch 1
    offsets = sorted({r.sample_offset for r in rollout_requests(backend)})
    assert offsets == [0, 1, 2, 3, 4, 5]
    rows = read_jsonl(Path(config.out) / "rollouts.jsonl")
    assert len(rows) == 5 * 3 * 2


def result_problems(config: LearnConfig):
    from tfgrpo.learn.loop import load_problems

    return load_problems(config, config.data)


def test_epochs_are_reshuffled_with_the_seed(tmp_path):
    data = write_problems(tmp_path / "d.jsonl", [(i, i + 1) for i in range(12)])
    config = LearnConfig(data=str(data), out=str(tmp_path / "x"), epochs=3, batch_size=5)
    problems = result_problems(config)
    plans = plan_steps(problems, config)
    order = {e: [p.id for s in plans if s.epoch == e for p in s.problems] for e in (1, 2, 3)}
    assert order[1] != order[2] != order[3]
    assert all(sorted(o) == sorted(p.id for p in problems) for o in order.values())
    assert [p.id for s in plan_steps(problems, config) for p in s.problems] == [
        p.id for s in plans for p in s.problems
    ]
    other_seed = config.model_copy(update={"seed": 7})
    assert [p.id for s in plan_steps(problems, other_seed) for p in s.problems] != [
        p.id for s in plans for p in s.problems
    ]


def test_homogeneous_groups_are_skipped(tmp_path):
    world = World(kinds={"1+1": "right"})
    result, backend, config = run_learn(tmp_path, world, [(1, 1), (2, 3)], group_size=4, epochs=1)
    step = result.metrics["steps"][0]
    assert step["groups_skipped_homogeneous"] == 1 and step["groups_kept"] == 1
    assert step["summaries"] == 4
    summaries = [r for r in backend.calls if r.tag == "summary"]
    # the two right and the two wrong rollouts wrote identical answers: one summary call each
    assert len(summaries) == 2 and all("What is 2+3?" in r.messages[0].content for r in summaries)
    groups = [r for r in backend.calls if r.tag == "group"]
    assert len(groups) == 1 and "What is 2+3?" in groups[0].messages[0].content
    rows = read_jsonl(Path(config.out) / "rollouts.jsonl")
    assert {r["group_status"] for r in rows if r["problem"] == "What is 1+1?"} == {"homogeneous"}
    assert {r["group_std"] for r in rows if r["problem"] == "What is 1+1?"} == {0.0}


def test_summary_max_tokens_bounds_only_the_summaries(tmp_path):
    settings = {"stage_sampling": {"temperature": 0.0, "max_tokens": 300}, "summary_max_tokens": 40}
    _, backend, _ = run_learn(tmp_path, World(), [(1, 1), (2, 3)], group_size=2, epochs=1, **settings)
    budgets = {(r.tag, r.sampling.max_tokens) for r in backend.calls if r.tag != "rollout"}
    assert budgets == {("summary", 40), ("group", 300), ("consolidate", 300)}


def test_library_is_injected_into_later_rollouts(tmp_path):
    result, backend, config = run_learn(tmp_path, World(), [(1, 2), (3, 4)], group_size=2, epochs=1, batch_size=1)
    assert {e.text for e in result.library} == {
        "When adding 3 and 4, check the carry.",
        "When adding 1 and 2, check the carry.",
    }
    first_step, second_step = [], []
    for request in rollout_requests(backend):
        system = request.messages[0].content if request.messages[0].role == "system" else ""
        (second_step if "[G0]" in system else first_step).append(request)
    assert len(first_step) == 2 and len(second_step) == 2  # step 2's prompts carry the lesson learned in step 1
    lesson = result.library.experiences[0].text
    assert all(lesson in r.messages[0].content for r in second_step)
    # the same renderer as eval: the injected block is exactly experiences.render of the step-1 library
    from tfgrpo.experiences.model import Library
    from tfgrpo.experiences.render import render

    step1 = Library.load(Path(config.out) / "steps" / "0001" / "library.json")
    assert render(step1) in second_step[0].messages[0].content
    assert step1.experiences[0].usage.in_context == 0
    final = Library.load(Path(config.out) / "library.json")
    assert final.get("G0").usage.in_context == 2  # counted for the two step-2 rollouts that saw it


def test_no_ground_truth_scores_against_the_group_majority(tmp_path):
    # gold answers are wrong on purpose: without ground truth they must not matter
    world = World(kinds={"2+3": "mostly"})
    world_reply = world.reply_for

    def mostly_right(messages, index):  # 3 of 4 samples say 5, one says 6
        reply = world_reply(messages, index)
        if isinstance(reply, str) and "\\boxed" in reply and "What is 2+3?" in messages[-1]["content"]:
            return "Adding gives \\boxed{6}" if index % 4 == 3 else "Adding gives \\boxed{5}"
        return reply

    world.reply_for = mostly_right
    result, backend, config = run_learn(
        tmp_path, world, [(2, 3)], group_size=4, epochs=1, ground_truth=False, answers={(2, 3): "999"}
    )
    rows = read_jsonl(Path(config.out) / "rollouts.jsonl")
    assert {r["pseudo_label"] for r in rows} == {"5"}
    assert [r["reward"] for r in sorted(rows, key=lambda r: r["sample"])] == [1.0, 1.0, 1.0, 0.0]
    summary = next(r for r in backend.calls if r.tag == "summary")
    assert "majority vote" in summary.messages[0].content and "999" not in summary.messages[0].content
    assert result.metrics["steps"][0]["groups_kept"] == 1


def test_group_size_one_still_learns(tmp_path):
    result, backend, config = run_learn(tmp_path, World(), [(1, 2), (3, 4)], group_size=1, epochs=1)
    step = result.metrics["steps"][0]
    assert step["groups_kept"] == 2 and step["summaries"] == 2 and step["ops_applied"] == 2


def test_validation_keeps_the_best_epoch(tmp_path):
    world = World()
    base_reply, base_group = world.reply_for, world.group_reply

    def val_aware(messages, index):
        if "What is 20+22?" in messages[-1]["content"]:  # validation: right only with exactly one lesson injected
            lessons = messages[0]["content"].count("[G")
            return "\\boxed{42}" if lessons == 1 else "\\boxed{0}"
        return base_reply(messages, index)

    def second_lesson(messages):  # once the library has a lesson, the group proposes another one
        if "[G0]" in messages[0]["content"]:
            return '```json\n[{"option": "add", "experience": "When adding, also estimate the size first."}]\n```'
        return base_group(messages)

    world.reply_for, world.group_reply = val_aware, second_lesson
    val = write_problems(tmp_path / "val.jsonl", [(20, 22)])
    result, backend, config = run_learn(
        tmp_path, world, [(1, 2)], group_size=2, epochs=2, val_data=str(val), val_samples=2
    )
    assert {v["epoch"]: v["mean_at_k"] for v in result.metrics["validation"]} == {1: 1.0, 2: 0.0}
    assert result.best_epoch == 1
    assert [e["val_mean_at_k"] for e in result.metrics["epochs"]] == [1.0, 0.0]
    from tfgrpo.experiences.model import Library

    final = Library.load(Path(config.out) / "library.json")
    assert (
        len(final) == 1
        and final.model_dump() == Library.load(Path(config.out) / "steps" / "0001" / "library.json").model_dump()
    )
    assert (
        len(Library.load(Path(config.out) / "steps" / "0002" / "library.json")) == 2
    )  # every epoch is still recorded
    assert len([r for r in backend.calls if r.tag == "validation"]) == 2 * 2


def test_run_directory_layout_and_metrics(tmp_path):
    result, backend, config = run_learn(
        tmp_path, World(), [(1, 2), (3, 4)], group_size=2, epochs=1, llm={"api_key": "sk-secret"}
    )
    out = Path(config.out)
    for name in (
        "config.yaml",
        "library.json",
        "rollouts.jsonl",
        "metrics.json",
        "cache.sqlite",
        "events.log",
        "state.json",
    ):
        assert (out / name).is_file(), name
    assert (out / "steps" / "0000" / "library.json").is_file() and (out / "steps" / "0001" / "library.json").is_file()
    assert "sk-secret" not in (out / "config.yaml").read_text()
    row = read_jsonl(out / "rollouts.jsonl")[0]
    for key in (
        "run",
        "epoch",
        "step",
        "batch",
        "query_id",
        "problem",
        "answer",
        "sample",
        "messages",
        "completion",
        "reward",
        "extracted",
        "reason",
        "error",
        "prompt_tokens",
        "completion_tokens",
        "library_version",
        "group_mean",
        "group_std",
    ):
        assert key in row, key
    metrics = json.loads((out / "metrics.json").read_text())
    totals = metrics["totals"]
    assert totals["rollouts"] == 4 and totals["ops_applied"] == 2 and totals["prompt_tokens"] > 0
    assert set(read_jsonl(out / "stages" / "summaries.jsonl")[0]) >= {"step", "query_id", "sample", "summary"}
    assert read_jsonl(out / "stages" / "consolidation.jsonl")[0]["final"]


def test_tool_rollouts_are_learned_from(tmp_path):
    """--tools python: each rollout runs code in the sandbox; the summaries see the tool call and its result."""
    from tfgrpo.llm.types import Completion

    world = World()

    def respond(request, index):
        messages = request.messages
        if request.tag != "rollout":
            return world.respond(request, index)
        if messages[-1].role == "tool":
            right = index % 2 == 0
            return f"The interpreter printed {messages[-1].content.strip()[:20]}. \\boxed{{{3 if right else 4}}}"
        call = {
            "id": f"call{index}",
            "type": "function",
            "function": {"name": "python", "arguments": json.dumps({"code": "print(1+2)"})},
        }
        return Completion(text="Let me compute.", tool_calls=[call], finish_reason="tool_calls")

    data = write_problems(tmp_path / "train.jsonl", [(1, 2)])
    config = LearnConfig(
        data=str(data),
        out=str(tmp_path / "run"),
        dedup=False,
        group_size=2,
        epochs=1,
        agent=AgentConfig(tools=["python"], max_turns=3),
    )
    backend = ScriptedBackend(respond)
    client = build_client(config.llm, backends=[backend], cache_path=Path(config.out) / "cache.sqlite")
    result = learn(config, client=client, console=Console(file=io.StringIO()))
    assert result.status == "completed" and len(result.library) == 1
    rows = read_jsonl(Path(config.out) / "rollouts.jsonl")
    assert [r["num_tool_calls"] for r in rows] == [1, 1]
    assert [r["reward"] for r in rows] == [1.0, 0.0]
    assert rows[0]["trajectory"]["turns"][0]["tool_calls"][0]["output"].strip() == "3"
    summary = next(r for r in backend.calls if r.tag == "summary").messages[0].content
    assert "[tool result: python, ok" in summary and "For each tool call" in summary


def test_no_ground_truth_learns_from_unlabelled_data(tmp_path):
    """Self-discrimination needs no answer column; ground-truth mode still refuses such a file."""
    from tfgrpo.core.errors import DatasetError

    data = tmp_path / "unlabelled.jsonl"
    data.write_text("".join(json.dumps({"id": f"u{i}", "problem": f"What is {i}+{i + 1}?"}) + "\n" for i in (1, 3)))
    config = LearnConfig(
        data=str(data), out=str(tmp_path / "run"), dedup=False, group_size=4, epochs=1, ground_truth=False
    )
    backend = ScriptedBackend(World(kinds={"1+2": "mixed", "3+4": "mixed"}).respond)
    client = build_client(config.llm, backends=[backend], cache_path=Path(config.out) / "cache.sqlite")
    result = learn(config, client=client, console=Console(file=io.StringIO()))
    assert result.status == "completed"
    rows = read_jsonl(Path(config.out) / "rollouts.jsonl")
    assert len(rows) == 8 and all(r["answer"] is None for r in rows)
    with pytest.raises(DatasetError, match="missing key 'answer'"):
        learn(
            config.model_copy(update={"ground_truth": True, "out": str(tmp_path / "gt")}),
            client=client,
            console=Console(file=io.StringIO()),
        )


def test_library_token_budget_evicts_and_counts(tmp_path):
    """`max_library_tokens`: the rendered library stays within budget; evictions are counted and logged."""
    from tfgrpo.experiences import render

    result, backend, config = run_learn(
        tmp_path, World(), [(1, 2), (3, 4), (5, 6)], group_size=2, epochs=1, batch_size=1, max_library_tokens=12
    )
    assert len(render(result.library)) / 4 <= 12
    assert result.metrics["totals"]["ops_evicted"] >= 1
    ops = read_jsonl(Path(config.out) / "library.history" / "ops.jsonl")
    assert any(r["kind"] == "evicted" for r in ops)
