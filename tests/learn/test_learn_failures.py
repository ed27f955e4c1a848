"""The Training-Free GRPO loop when things go wrong: failed calls, malformed operation replies, a permanent
error, a step where every call failed, rollouts no reward can score."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from tests.helpers.learn_runs import run_learn
from tests.helpers.learn_world import World, read_jsonl, write_problems
from tfgrpo.learn.config import LearnConfig
from tfgrpo.learn.loop import learn
from tfgrpo.llm.backends.scripted import ScriptedBackend
from tfgrpo.llm.errors import ServerError
from tfgrpo.llm.factory import build_client

pytestmark = pytest.mark.timeout(120)


def test_failed_calls_are_excluded_not_scored_zero(tmp_path):
    world = World(kinds={"2+3": "flaky", "4+5": "down"})
    result, backend, config = run_learn(tmp_path, world, [(2, 3), (4, 5)], group_size=4, epochs=1)
    step = result.metrics["steps"][0]
    assert step["rollouts"] == 8 and step["rollouts_failed"] == 1 + 3
    assert step["api_failures"] == 4
    # flaky group: samples 0, 2 right, 1 wrong, 3 failed -> accuracy 2/3, not 2/4
    assert step["rollouts_scored"] == 3 and step["correct"] == 2 and step["accuracy"] == pytest.approx(2 / 3)
    assert step["groups_skipped_too_few_valid"] == 1 and step["groups_kept"] == 1
    assert step["summaries"] == 3  # only valid rollouts are summarised
    rows = read_jsonl(Path(config.out) / "rollouts.jsonl")
    failed = [r for r in rows if r["error"]]
    assert len(failed) == 4 and all(r["reward"] is None for r in failed)
    assert "scripted outage" in failed[0]["error"]
    flaky = [r for r in rows if r["problem"] == "What is 2+3?" and not r["error"]]
    assert [r["group_mean"] for r in flaky] == pytest.approx([2 / 3] * 3)


def test_malformed_op_replies_get_one_retry_with_feedback(tmp_path):
    world = World(group_mode="malformed_once")
    result, backend, config = run_learn(tmp_path, world, [(1, 2)], group_size=2, epochs=1)
    groups = [r for r in backend.calls if r.tag == "group"]
    assert len(groups) == 2
    retry = groups[1].messages
    assert retry[1].role == "assistant" and "will not write JSON" in retry[1].content
    assert "could not find a JSON list" in retry[2].content
    step = result.metrics["steps"][0]
    assert step["parse_retries"] == 1 and step["parse_failures"] == 0 and step["ops_applied"] == 1
    row = read_jsonl(Path(config.out) / "stages" / "group_ops.jsonl")[0]
    assert len(row["attempts"]) == 2 and row["retried"] and not row["malformed"]


def test_malformed_op_replies_are_recorded_and_the_run_goes_on(tmp_path):
    world = World(group_mode="malformed_always")
    result, backend, config = run_learn(tmp_path, world, [(1, 2), (3, 4)], group_size=2, epochs=2)
    assert result.status == "completed" and len(result.library) == 0
    groups = [r for r in backend.calls if r.tag == "group"]
    # two groups x exactly one retry; epoch 2 sends the very same temperature-0 prompts, answered by the cache
    assert len(groups) == 2 * 2
    assert result.metrics["totals"]["parse_failures"] == 4 and result.metrics["totals"]["parse_retries"] == 4
    assert not [r for r in backend.calls if r.tag == "consolidate"]  # nothing proposed, no consolidation call
    rows = read_jsonl(Path(config.out) / "stages" / "group_ops.jsonl")
    assert len(rows) == 4 and all(r["malformed"] and len(r["attempts"]) == 2 for r in rows)


def test_a_permanent_error_stops_the_run_instead_of_failing_every_sample(tmp_path):
    """A bad key or unknown model is the user's to fix: one clear error, not a 'completed' run of failures."""
    from tfgrpo.llm.errors import PermanentError

    world = World()
    data = write_problems(tmp_path / "train.jsonl", [(1, 2), (3, 4)])
    config = LearnConfig(data=str(data), out=str(tmp_path / "run"), dedup=False, group_size=2, epochs=1)
    backend = ScriptedBackend(lambda request, index: PermanentError("401 invalid API key"))
    client = build_client(config.llm, backends=[backend], cache_path=Path(config.out) / "cache.sqlite")
    with pytest.raises(PermanentError, match="invalid API key"):
        learn(config, client=client, console=Console(file=io.StringIO()))
    assert len(backend.calls) <= 4  # no retries of a permanent error
    assert json.loads((Path(config.out) / "state.json").read_text())["status"] == "failed"
    assert world  # the run directory stays resumable once the key is fixed


def test_a_step_where_every_call_failed_is_an_error_not_a_result(tmp_path):
    from tfgrpo.llm.errors import AllRequestsFailedError

    world = World(kinds={"1+2": "down", "3+4": "down"})
    world.reply_for = lambda messages, index: ServerError("scripted outage", status=503)
    with pytest.raises(AllRequestsFailedError, match="every rollout of step 1 failed"):
        run_learn(tmp_path, world, [(1, 2), (3, 4)], group_size=2, epochs=1)


def test_unscorable_rollouts_are_left_out_of_group_statistics(tmp_path, monkeypatch):
    """A reward of None is no evidence: the group's mean/std use the scored rollouts only, and it is counted."""
    import tfgrpo.learn.loop
    from tfgrpo.rewards import Score, get_reward

    math = get_reward("math")

    class CannotTell:  # None for an answer without a box, else the math reward
        name = "cannot-tell"

        def score(self, completions, **columns):
            scores = math.score(completions, **columns)
            return [
                s if "\\boxed" in c else Score(None, None, "no box") for c, s in zip(completions, scores, strict=False)
            ]

    monkeypatch.setattr(tfgrpo.learn.loop, "build_reward", lambda name, client=None, **kw: CannotTell())
    world = World(kinds={"1+2": "right"})
    base = world.reply_for

    def sometimes_unscorable(messages, index):
        reply = base(messages, index)
        if isinstance(reply, str) and "\\boxed" in reply and index % 4 == 3:
            return "I would rather not say."
        return reply

    world.reply_for = sometimes_unscorable
    result, backend, config = run_learn(tmp_path, world, [(1, 2)], group_size=4, epochs=1)
    step = result.metrics["steps"][0]
    assert (step["rollouts_scored"], step["rollouts_unscored"]) == (3, 1)
    # three right answers and one unscorable: homogeneous, not a mixed group with a spurious 0
    assert step["groups_skipped_homogeneous"] == 1 and step["groups_kept"] == 0
