"""The judge reward wired to the client layer: its verdict schema reaches an OpenAI-compatible server that
checks the request, the verdict that comes back is used, a malformed one is retried and counted, and the
counts land in the client's accounting (the usage snapshot of metrics.json) and in a learn run's totals."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.helpers.servers import Reply
from tests.helpers.structured import completion_carrying
from tfgrpo.learn.metrics import judge_reply_counts
from tfgrpo.llm.backends.openai_backend import OpenAIBackend
from tfgrpo.llm.client import LLMClient
from tfgrpo.rewards.verdict import verdict_schema
from tfgrpo.rollout.scoring import background_loop, build_reward

pytestmark = pytest.mark.timeout(60)


def grading_server(request_body: dict) -> Reply:
    """Refuses a request without the verdict schema; grades 'Paris' CORRECT, 'Lyon' with a broken reply
    first (then a valid one on the retry, which carries the feedback)."""
    sent = (request_body.get("response_format") or {}).get("json_schema", {})
    if sent.get("schema") != verdict_schema() or sent.get("strict") is not True:
        return Reply(status=400, body={"error": {"message": "response_format missing or wrong", "type": "invalid"}})
    prompt = request_body["messages"][1]["content"]
    if len(request_body["messages"]) > 2:
        return Reply(body=completion_carrying(json.dumps({"reasoning": "Lyon is not Paris.", "verdict": "INCORRECT"})))
    if "Response:\nParis" in prompt:
        return Reply(body=completion_carrying(json.dumps({"reasoning": "Same city.", "verdict": "CORRECT"})))
    return Reply(body=completion_carrying('{"reasoning": "Lyon is not'))  # cut off: nothing to read


def test_judge_sends_its_schema_and_counts_every_verdict(fault_server):
    fault_server.responder = grading_server
    client = LLMClient(OpenAIBackend("m", base_url=fault_server.base_url), max_retries=0)
    with background_loop() as loop:
        reward = build_reward("judge", client, loop=loop, concurrency=1)
        scores = reward.score(["Paris", "Lyon"], answer=["Paris"] * 2, problem=["Capital of France?"] * 2)
        asyncio.run_coroutine_threadsafe(client.aclose(), loop).result()
    assert [s.value for s in scores] == [1.0, 0.0]
    assert "Same city." in scores[0].reason
    assert len(fault_server.requests) == 3  # two verdicts, one retry; every one under the schema
    assert all(r.body["response_format"]["json_schema"]["name"] == "judge_verdict" for r in fault_server.requests)
    usage = client.accounting.snapshot()
    assert usage["by_tag"]["judge"]["calls"] == 3
    counts = {"replies": 2, "enforced": 2, "parsed": 1, "repaired": 0, "retried": 1, "lost": 0}
    assert usage["structured_replies"]["judge"] == counts == reward.reply_counts
    # a learn run sums its sessions' usage into totals.stage_replies.judge
    assert judge_reply_counts([{"usage": usage}, {"usage": usage}, {}])["judge"]["retried"] == 2
    assert judge_reply_counts([{"usage": {"by_tag": {}}}]) == {}


def test_a_server_refusing_the_schema_falls_back_and_the_parser_reads_the_verdict(fault_server):
    def respond(body: dict) -> Reply:
        if "response_format" in body:
            return Reply(status=400, body={"error": {"message": "Unsupported parameter: response_format"}})
        return Reply(body=completion_carrying("Same city.\nVERDICT: CORRECT"))

    fault_server.responder = respond
    client = LLMClient(OpenAIBackend("m", base_url=fault_server.base_url), max_retries=0)
    with background_loop() as loop:
        reward = build_reward("judge", client, loop=loop)
        [score] = reward.score(["Paris"], answer=["Paris"], problem=["Capital of France?"])
        asyncio.run_coroutine_threadsafe(client.aclose(), loop).result()
    assert score.value == 1.0 and client.schema_fallbacks
    assert reward.reply_counts == {"replies": 1, "enforced": 0, "parsed": 0, "repaired": 1, "retried": 0, "lost": 0}


class JudgingWorld:
    """The learn test world, with its own model as the judge: wrong sums get a broken verdict first."""

    def __init__(self) -> None:
        from tests.helpers.learn_world import World

        self.world = World()

    def respond(self, request, index):
        if request.tag != "judge":
            return self.world.respond(request, index)
        if len(request.messages) > 2:  # the retry, with the parser's feedback
            return json.dumps({"reasoning": "The sum is off.", "verdict": "INCORRECT"})
        prompt = request.messages[-1].content
        reference = prompt.split("Reference answer:\n")[1].split("\n")[0]
        if f"\\boxed{{{reference}}}" in prompt:
            return json.dumps({"reasoning": "Same sum.", "verdict": "CORRECT"})
        return "The sum looks wrong to me."


def test_a_learn_run_with_the_judge_reports_its_verdict_counts(tmp_path):
    from tests.helpers.learn_runs import run_learn

    result, backend, _ = run_learn(tmp_path, JudgingWorld(), [(1, 2), (3, 4)], group_size=2, epochs=1, reward="judge")
    judge = result.metrics["totals"]["stage_replies"]["judge"]
    # 2 problems x 2 samples: the world answers even samples right, odd ones wrong (retried, then read)
    assert judge == {"replies": 4, "enforced": 0, "parsed": 2, "repaired": 0, "retried": 2, "lost": 0}
    assert result.metrics["totals"]["stage_replies_lost"] == 0
    assert sum(r.tag == "judge" for r in backend.calls) == 6 and len(result.library) == 2
