"""Stages 0-2 run per query (tfgrpo.learn.query_stages): a query's summaries and group analysis do not wait for
another query's slow rollouts, the consolidation waits for every query, and the step's records are the ones a
stage-by-stage step wrote."""

from __future__ import annotations

import asyncio
import io
import json
import time
from pathlib import Path

import pytest
from rich.console import Console

from tests.helpers.learn_world import PROBLEM, World, read_jsonl, write_problems
from tfgrpo.learn.config import LearnConfig
from tfgrpo.learn.loop import learn
from tfgrpo.llm.backends.scripted import ScriptedBackend
from tfgrpo.llm.factory import build_client
from tfgrpo.llm.types import ChatRequest, Completion

pytestmark = pytest.mark.timeout(120)

SLOW, FAST = (1, 2), (3, 4)
SLOW_S = 0.6


def stage_of(request: ChatRequest) -> str:
    first = request.messages[0].content or ""
    for stage, marker in (("consolidate", "<proposed_changes>"), ("group", "<attempt "), ("summary", "<trajectory>")):
        if marker in first:
            return stage
    return "rollout"


class SlowQueryBackend(ScriptedBackend):
    """Answers the rollouts of "What is 1+2?" after SLOW_S, everything else at once; logs when each request
    was sent and answered, by stage and query."""

    def __init__(self, world: World):
        super().__init__(world.respond)
        self.log: list[tuple[str, str, float, float]] = []  # stage, query, sent, answered

    async def forward(self, request: ChatRequest) -> list[Completion]:
        stage = stage_of(request)
        text = "\n".join(m.content or "" for m in request.messages)
        match = PROBLEM.search(text)
        query = match[0] if match else ""  # the consolidation is the batch's, of no one query
        sent = time.perf_counter()
        if stage == "rollout" and query == "What is 1+2?":
            await asyncio.sleep(SLOW_S)
        completions = await super().forward(request)
        self.log.append((stage, query, sent, time.perf_counter()))
        return completions


def run(tmp_path: Path, backend: ScriptedBackend, **overrides):
    data = write_problems(tmp_path / "train.jsonl", [SLOW, FAST])
    settings = {"group_size": 2, "epochs": 1, "batch_size": 2, "dedup": False, "llm": {"max_retries": 0}}
    config = LearnConfig(data=str(data), out=str(tmp_path / "run"), **{**settings, **overrides})
    client = build_client(config.llm, backends=[backend], cache_path=Path(config.out) / "cache.sqlite")
    return config, learn(config, client=client, console=Console(file=io.StringIO()))


def test_a_fast_query_is_summarised_and_analysed_while_a_slow_querys_rollouts_are_out(tmp_path):
    backend = SlowQueryBackend(World())
    config, result = run(tmp_path, backend)
    assert result.status == "completed"

    def times(stage: str, query: str) -> list[tuple[float, float]]:
        return [(sent, answered) for s, q, sent, answered in backend.log if s == stage and q == query]

    slow_rollouts_answered = max(answered for _, answered in times("rollout", "What is 1+2?"))
    fast_summaries, fast_group = times("summary", "What is 3+4?"), times("group", "What is 3+4?")
    assert fast_summaries and fast_group
    # the fast query went through its summaries and its analysis while the slow one's rollouts were out
    assert max(answered for _, answered in fast_group) < slow_rollouts_answered
    # and the consolidation waited for both queries' analyses
    ((consolidation_sent, _),) = times("consolidate", "")
    assert consolidation_sent > max(answered for s, _, _, answered in backend.log if s == "group")

    # the step's records: every stage's rows, in the batch's query order, and the four stage times
    step = result.metrics["steps"][0]
    assert set(step["stage_seconds"]) == {"rollouts", "summaries", "group_advantage", "consolidation"}
    assert step["stage_seconds"]["rollouts"] >= SLOW_S  # the last query's rollouts ended the stage
    # (the batch's order, whichever query answered first: the plan's shuffle, not the replies' arrival)
    order = {"What is 1+2?": "q1_2", "What is 3+4?": "q3_4"}
    rollouts = [order[row["problem"]] for row in read_jsonl(Path(config.out) / "rollouts.jsonl")]
    assert sorted(rollouts) == ["q1_2", "q1_2", "q3_4", "q3_4"] and rollouts[0] == rollouts[1]
    summaries = read_jsonl(Path(config.out) / "stages" / "summaries.jsonl")
    assert [row["query_id"] for row in summaries] == rollouts
    groups = read_jsonl(Path(config.out) / "stages" / "group_ops.jsonl")
    assert [row["query_id"] for row in groups] == rollouts[::2]


def test_per_query_stages_send_the_requests_a_resumed_run_finds_in_the_cache(tmp_path):
    """The same run again over the same run directory's cache pays for nothing: the requests are deterministic."""
    world = World()
    config, first = run(tmp_path, SlowQueryBackend(world))
    paid = len(world.answered)
    library = json.loads((Path(config.out) / "library.json").read_text(encoding="utf-8"))
    again = World()
    backend = SlowQueryBackend(again)
    client = build_client(config.llm, backends=[backend], cache_path=Path(config.out) / "cache.sqlite")
    rerun = config.model_copy(update={"out": str(tmp_path / "rerun")})
    second = learn(rerun, client=client, console=Console(file=io.StringIO()))
    assert second.status == "completed" and paid > 0
    assert again.answered == []  # every request of the rerun was in the cache
    assert [e.text for e in second.library.experiences] == [e["text"] for e in library["experiences"]]
