"""Structured outputs' capability fallback: an endpoint that refuses `response_format` (400, or llama-cpp's
500) gets the next weaker form (json_schema -> json_object + schema -> json_object -> none) from then on,
learn finishes without a failed step, and `--structured-output off|on` do what they say."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.helpers.servers import Reply
from tests.helpers.structured import GREEDY, VALID, completion_carrying, refusing
from tfgrpo.experiences.model import Library
from tfgrpo.learn.stages import operations_response_schema, request_operations
from tfgrpo.llm.backends.openai_backend import OpenAIBackend
from tfgrpo.llm.backends.scripted import ScriptedBackend
from tfgrpo.llm.client import LLMClient
from tfgrpo.llm.errors import BackendUnavailableError

pytestmark = pytest.mark.timeout(120)


async def group_operations(client: LLMClient, question: str, library: Library | None = None):
    """One group-stage operations request for `question`, as the engine sends it (greedy, 32-word lessons)."""
    return await request_operations(
        client,
        [{"role": "user", "content": question}],
        library=library if library is not None else Library(),
        sampling=GREEDY,
        tag="group",
        max_words=32,
    )


async def test_a_server_refusing_response_format_is_used_without_it_from_then_on(fault_server):
    fault_server.responder = refusing({"json_schema", "json_object"})
    client = LLMClient(OpenAIBackend("m", base_url=fault_server.base_url), max_retries=0)
    library = Library()
    try:
        first = await group_operations(client, "a", library)
        calls_after_first = len(fault_server.requests)
        second = await group_operations(client, "b", library)
    finally:
        await client.aclose()
    assert len(first.operations) == 1 and not first.lost and not first.enforced  # the parser took over
    assert len(second.operations) == 1 and not second.enforced
    assert calls_after_first == 4  # json_schema, json_object + schema, json_object refused; then without
    assert [("response_format" in r.body) for r in fault_server.requests[calls_after_first:]] == [False]
    assert (
        list(client.schema_fallbacks) == [fault_server.base_url]
        and "Unsupported parameter" in client.schema_fallbacks[fault_server.base_url]
    )
    assert client.accounting.total.failed_calls == 0


async def test_a_server_with_json_mode_only_gets_json_object(fault_server):
    fault_server.responder = refusing({"json_schema"})
    backend = OpenAIBackend("m", base_url=fault_server.base_url)
    client = LLMClient(backend, max_retries=0)
    try:
        for question in ("a", "b"):
            reply = await group_operations(client, question)
            assert reply.enforced and reply.strict and len(reply.operations) == 1
    finally:
        await client.aclose()
    forms = [r.body["response_format"] for r in fault_server.requests]
    assert [f["type"] for f in forms] == ["json_schema", "json_object", "json_object"] and backend.format_level == 1
    assert (
        forms[1]["schema"]
        == operations_response_schema(Library(), max_ops=None, max_words=32, max_tokens=GREEDY.max_tokens).json_schema
    )
    assert not client.schema_fallbacks


async def test_a_500_naming_response_format_counts_as_a_refusal(fault_server):
    """llama-cpp-python's server answers an unknown response_format type with HTTP 500."""

    def respond(body: dict) -> Reply:
        if body["response_format"]["type"] == "json_schema":
            return Reply(
                status=500,
                body={"error": {"message": "body.response_format.type: Input should be 'text' or 'json_object'"}},
            )
        return Reply(body=completion_carrying(VALID))

    fault_server.responder = respond
    client = LLMClient(OpenAIBackend("m", base_url=fault_server.base_url), max_retries=3, backoff_initial_s=0.01)
    try:
        reply = await group_operations(client, "a")
    finally:
        await client.aclose()
    assert reply.enforced and reply.strict and len(fault_server.requests) == 2  # no blind retries of the 500


async def test_structured_output_off_sends_no_schema_and_on_refuses_a_backend_without_support(fault_server):
    fault_server.responder = refusing(set())
    client = LLMClient(OpenAIBackend("m", base_url=fault_server.base_url), max_retries=0, structured_output="off")
    try:
        reply = await group_operations(client, "a")
    finally:
        await client.aclose()
    assert "response_format" not in fault_server.requests[0].body and len(reply.operations) == 1 and not reply.strict
    with pytest.raises(BackendUnavailableError, match="cannot enforce a JSON schema"):
        LLMClient(ScriptedBackend(lambda request, index: "x"), structured_output="on")


def test_structured_output_is_a_config_field_and_a_cli_option():
    from tfgrpo.core.config import build_config
    from tfgrpo.learn.config import LearnConfig
    from tfgrpo.llm.config import LLMConfig

    assert LLMConfig().structured_output == "auto"
    config = build_config(LearnConfig, None, {"data": "easy", "llm": {"structured_output": "off"}})
    assert config.llm.structured_output == "off"


def test_learn_against_a_server_refusing_response_format_falls_back_without_a_failed_step(tmp_path):
    from tests.helpers.learn_world import World, WorldServer, write_problems
    from tfgrpo.learn.config import LearnConfig
    from tfgrpo.learn.loop import learn_async

    class RefusingServer(WorldServer):
        def answer(self, body: dict) -> tuple[int, dict]:
            if "response_format" in body:
                with self._lock:
                    self.bodies.append(body)
                return 400, {
                    "error": {"message": "Unsupported parameter: 'response_format'", "type": "invalid_request_error"}
                }
            return super().answer(body)

    data = write_problems(tmp_path / "train.jsonl", [(1, 2), (3, 4)])
    with RefusingServer(World()) as server:
        config = LearnConfig(
            data=str(data),
            out=str(tmp_path / "run"),
            group_size=2,
            epochs=1,
            dedup=False,
            llm={
                "backend": "openai",
                "model": "world",
                "base_url": [server.base_url],
                "api_key": "k",
                "max_retries": 0,
            },
        )
        result = asyncio.run(learn_async(config))
        refused = [b for b in server.bodies if "response_format" in b]
    assert result.status == "completed" and len(result.library) == 2
    totals = result.metrics["totals"]
    assert totals["api_failures"] == 0 and totals["group_calls_failed"] == 0 and totals["stage_replies_lost"] == 0
    assert totals["stage_replies"]["group"]["enforced"] == 0
    # detected on the first (concurrent) group requests, each form refused once; consolidation gets no schema
    assert 3 <= len(refused) <= 3 * 2
    assert not [b for b in refused if "<proposed_changes>" in b["messages"][0]["content"]]
    session = json.loads((tmp_path / "run" / "state.json").read_text())["sessions"][-1]
    assert session["structured_output"]["fallbacks"] == {
        server.base_url: session["structured_output"]["fallbacks"][server.base_url]
    }
    assert "Unsupported parameter" in session["structured_output"]["fallbacks"][server.base_url]


async def test_concurrent_refusals_do_not_skip_a_response_format_form(fault_server):
    fault_server.responder = refusing({"json_schema"})
    fault_server.default = Reply(delay_s=0.2)
    backend = OpenAIBackend("m", base_url=fault_server.base_url)
    client = LLMClient(backend, max_retries=0)
    try:
        await asyncio.gather(*[group_operations(client, q) for q in "abcd"])
    finally:
        await client.aclose()
    accepted = [
        r.body["response_format"] for r in fault_server.requests if r.body["response_format"]["type"] == "json_object"
    ]
    assert len(accepted) == 4 and all("schema" in f for f in accepted) and backend.format_level == 1
