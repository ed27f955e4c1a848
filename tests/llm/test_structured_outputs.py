"""Structured outputs: one schema source (experiences.schemas), sent by every backend, with the capability
fallback when an endpoint refuses it (test_structured_outputs_fallback.py), and the per-stage reply
counters. Real-model tests are in test_structured_outputs_models.py (slow)."""

from __future__ import annotations

import importlib.machinery
import json
import sys
import types
from dataclasses import dataclass

import pytest

from tests.helpers.servers import FaultServer, Reply, ask
from tests.helpers.structured import GREEDY, VALID, completion_carrying
from tfgrpo.experiences.model import Library
from tfgrpo.experiences.ops import AddOp, ModifyOp
from tfgrpo.experiences.schemas import CHARS_PER_WORD, allowed_options, operations_schema, reply_format
from tfgrpo.learn.stages import operations_response_schema, render_stage_prompt, request_operations
from tfgrpo.llm.backends.openai_backend import OpenAIBackend
from tfgrpo.llm.backends.scripted import ScriptedBackend
from tfgrpo.llm.client import LLMClient
from tfgrpo.llm.types import ResponseSchema, SamplingParams

pytestmark = pytest.mark.timeout(120)


def library_with(*texts: str) -> Library:
    return Library.from_texts(texts)


# -- the schema ---------------------------------------------------------------------------------------


def test_schema_of_an_empty_library_allows_only_add_and_caps_k():
    schema = operations_schema(max_ops=2, ids=[], max_words=10)
    operations = schema["properties"]["operations"]
    assert operations["maxItems"] == 2
    assert operations["items"]["properties"]["option"] == {"type": "string", "enum": ["add"]}
    assert operations["items"]["properties"]["experience"]["maxLength"] == 10 * CHARS_PER_WORD
    assert schema["required"] == ["reasoning", "operations"] and schema["additionalProperties"] is False


def test_schema_names_only_existing_ids_and_is_strict_everywhere():
    schema = operations_schema(max_ops=3, ids=["G0", "G1"])
    variants = {
        item["properties"]["option"]["enum"][0]: item for item in schema["properties"]["operations"]["items"]["anyOf"]
    }
    assert set(variants) == {"add", "modify", "delete", "merge"}
    assert variants["modify"]["properties"]["id"]["enum"] == ["G0", "G1"]
    assert variants["merge"]["properties"]["ids"]["items"]["enum"] == ["G0", "G1"]
    for item in variants.values():  # OpenAI strict mode: every property required, nothing else allowed
        assert item["additionalProperties"] is False and set(item["required"]) == set(item["properties"])


def test_schema_follows_the_pydantic_models():
    schema = operations_schema(ids=["G0"])
    variants = {
        item["properties"]["option"]["enum"][0]: item for item in schema["properties"]["operations"]["items"]["anyOf"]
    }
    assert set(variants["add"]["properties"]) == set(AddOp.model_fields)
    assert set(variants["modify"]["properties"]) == set(ModifyOp.model_fields)
    assert (
        variants["modify"]["properties"]["experience"]["description"]
        == ModifyOp.model_fields["experience"].description
    )


def test_prompt_templates_show_the_reply_format_of_the_schema():
    text = reply_format(max_ops=3, ids=[])
    assert '"option": "add"' in text and '"modify"' not in text  # empty library: add only, as the schema says
    assert set(allowed_options(["G1"])) == {"add", "modify", "delete"}  # a merge needs two experiences
    assert set(allowed_options(["G1", "G2"])) == {"add", "modify", "delete", "merge"}
    prompt = render_stage_prompt(
        "group_advantage",
        problem="p",
        gold="1",
        gold_is_pseudo=False,
        experiences="",
        attempts=[],
        max_ops=3,
        max_words=20,
        reply_format=text,
    )
    assert text in prompt


def test_cache_key_includes_the_schema():
    schema = ResponseSchema(name="x", schema={"type": "object"})
    other = ResponseSchema(name="x", schema={"type": "array"})
    plain = ask().sample_key("m", 0)
    assert ask(response_schema=schema).sample_key("m", 0) != plain
    assert ask(response_schema=schema).sample_key("m", 0) != ask(response_schema=other).sample_key("m", 0)


# -- the openai backend against a server that checks the request --------------------------------------


def checking_server(server: FaultServer, expected_schema: dict) -> None:
    def respond(body: dict) -> Reply:
        sent = (body.get("response_format") or {}).get("json_schema", {})
        if sent.get("schema") != expected_schema or sent.get("strict") is not True:
            return Reply(
                status=400, body={"error": {"message": "response_format missing or wrong", "type": "invalid"}}
            )
        return Reply(text=VALID, body=completion_carrying(VALID))

    server.responder = respond


async def test_openai_backend_sends_the_schema_and_the_reply_is_used_as_is(fault_server):
    library = library_with("Check units.")
    expected = operations_response_schema(library, max_ops=3, max_words=32, max_tokens=GREEDY.max_tokens).json_schema
    checking_server(fault_server, expected)
    client = LLMClient(OpenAIBackend("m", base_url=fault_server.base_url), max_retries=0)
    try:
        reply = await request_operations(
            client,
            [{"role": "user", "content": "go"}],
            library=library,
            sampling=GREEDY,
            tag="group",
            max_words=32,
            max_ops=3,
        )
    finally:
        await client.aclose()
    assert [op.to_wire() for op in reply.operations] == [{"option": "add", "experience": "Check carries."}]
    assert reply.enforced and reply.strict and not reply.retried and not reply.lost


async def test_litellm_backend_sends_the_schema(fault_server):
    from tfgrpo.llm.backends.litellm_backend import LiteLLMBackend

    library = Library()
    expected = operations_response_schema(library, max_ops=2, max_words=32, max_tokens=GREEDY.max_tokens).json_schema
    checking_server(fault_server, expected)
    client = LLMClient(LiteLLMBackend("openai/m", api_base=fault_server.base_url, api_key="sk-x"), max_retries=0)
    try:
        reply = await request_operations(
            client,
            [{"role": "user", "content": "go"}],
            library=library,
            sampling=GREEDY,
            tag="group",
            max_words=32,
            max_ops=2,
        )
    finally:
        await client.aclose()
    assert reply.enforced and reply.strict and len(reply.operations) == 1


async def test_consolidation_with_a_new_lesson_proposed_must_keep_an_operation():
    """The template allows an empty final list only when the library already has every proposed lesson; when
    some proposed lesson is new (not the same text, not a near duplicate the store found), the schema
    requires one operation (SmolLM2 otherwise dropped every proposal)."""
    from tfgrpo.learn.stages import OpsReply
    from tfgrpo.learn.stages.advantage import GroupAnalysis
    from tfgrpo.learn.stages.consolidate import NearDuplicate, consolidate

    backend = ScriptedBackend(lambda request, i: VALID)
    backend.supports_response_schema = True  # a scripted stand-in for a backend that enforces schemas
    client = LLMClient(backend, max_retries=0)
    proposals = OpsReply(operations=[AddOp(experience="Check carries."), AddOp(experience="Re-read the question.")])
    analyses = [GroupAnalysis(query_id="q1", reply=proposals)]
    near = [NearDuplicate(text="Re-read the question.", id="G1", similarity=0.97)]
    cases = (
        (library_with(), [], 1),  # empty library: everything is new
        (library_with("Check units."), [], 1),  # new lessons
        (library_with("Check carries.", "Re-read the question."), [], None),  # same texts: may keep none
        (library_with("Check carries.", "Read twice."), near, None),  # the other one is a near duplicate
        (library_with("Check carries.", "Read twice."), [], 1),
    )
    try:
        for library, near_duplicates, min_items in cases:
            await consolidate(
                client,
                analyses,
                library=library,
                library_text="\n".join(e.text for e in library),
                near_duplicates=near_duplicates,
                template="consolidate",
                sampling=SamplingParams(temperature=0.0, max_tokens=1024),
                max_words=32,
            )
            operations = backend.calls[-1].response_schema.json_schema["properties"]["operations"]
            assert operations.get("minItems") == min_items and operations["maxItems"] == 2
    finally:
        await client.aclose()


async def test_a_group_must_propose_an_operation_when_the_library_is_empty():
    """The group template allows an empty list only when the library already has the lesson: an empty
    library cannot, so the schema requires one operation there (SmolLM2 replied "operations": [])."""
    from tfgrpo.learn.stages.advantage import GroupRequest, analyze_group

    backend = ScriptedBackend(lambda request, i: VALID)
    backend.supports_response_schema = True  # a scripted stand-in for a backend that enforces schemas
    client = LLMClient(backend, max_retries=0)
    request = GroupRequest("q1", "What is 2+2?", "4", False, [])
    try:
        for library, min_items in ((library_with(), 1), (library_with("Check units."), None)):
            await analyze_group(
                client,
                request,
                library=library,
                library_text="\n".join(e.text for e in library),
                template="group_advantage",
                sampling=SamplingParams(temperature=0.0, max_tokens=1024),
                max_ops=2,
                max_words=32,
            )
            operations = backend.calls[-1].response_schema.json_schema["properties"]["operations"]
            assert operations.get("minItems") == min_items and operations["maxItems"] == 2
    finally:
        await client.aclose()


# -- vLLM in process, against its stand-in -------------------------------------------------------------


@dataclass
class FakeStructuredOutputsParams:
    json: dict | None = None


async def test_vllm_gets_structured_outputs_params(monkeypatch):
    from tests.helpers import vllm_stand_in as stand_in

    stand_in.FakeLLM.instances.clear()
    vllm = types.ModuleType("vllm")
    vllm.__spec__ = importlib.machinery.ModuleSpec("vllm", loader=None)
    vllm.LLM, vllm.SamplingParams = (
        stand_in.FakeLLM,
        _sampling_params_with_structured_outputs(stand_in.FakeSamplingParams),
    )
    sampling_params = types.ModuleType("vllm.sampling_params")
    sampling_params.StructuredOutputsParams = FakeStructuredOutputsParams
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", sampling_params)
    from tfgrpo.llm.backends.vllm_backend import VLLMBackend

    backend = VLLMBackend()
    schema = operations_response_schema(Library(), max_ops=2, max_words=32)
    client = LLMClient(backend)
    try:
        [completion] = await client.chat([{"role": "user", "content": "q"}], sampling=GREEDY, response_schema=schema)
    finally:
        await client.aclose()
    [call] = stand_in.FakeLLM.instances[0].chat_calls
    assert call["sampling_params"][0].structured_outputs == FakeStructuredOutputsParams(json=schema.json_schema)
    assert completion.schema_enforced and completion.text == "q #0"


def _sampling_params_with_structured_outputs(base: type) -> type:
    @dataclass
    class WithStructuredOutputs(base):
        structured_outputs: FakeStructuredOutputsParams | None = None

    return WithStructuredOutputs


# -- in a learn run --------------------------------------------------------------------------------------


def test_learn_counts_stage_replies_per_stage(tmp_path):
    from tests.helpers.learn_runs import run_learn
    from tests.helpers.learn_world import World

    result, _, _ = run_learn(tmp_path, World(group_mode="malformed_once"), [(1, 2), (3, 4)], group_size=2, epochs=1)
    totals = result.metrics["totals"]
    assert totals["stage_replies"]["group"] == {
        "replies": 2,
        "enforced": 0,
        "parsed": 0,
        "repaired": 0,
        "retried": 2,
        "lost": 0,
    }
    assert totals["stage_replies"]["consolidate"] == {
        "replies": 1,
        "enforced": 0,
        "parsed": 0,
        "repaired": 1,
        "retried": 0,
        "lost": 0,
    }
    assert totals["stage_replies_lost"] == 0
    assert result.metrics["steps"][0]["stage_replies"]["group"]["retried"] == 2


def test_string_bounds_fit_the_token_budget():
    from tfgrpo.experiences.schemas import CHARS_PER_TOKEN, OP_OVERHEAD_CHARS

    assert CHARS_PER_TOKEN == 1  # the worst case: SmolLM2 spends a token on each digit and dot of "1.1.1."
    for max_tokens, max_items in ((192, 1), (256, 2), (2048, 3)):
        schema = operations_schema(max_ops=3, ids=[], max_words=32, max_tokens=max_tokens)
        reasoning = schema["properties"]["reasoning"]["maxLength"]
        operations = schema["properties"]["operations"]
        lesson = operations["items"]["properties"]["experience"]
        # a reply filling every string to its bound still ends within max_tokens, even at one token per
        # character; a budget too small for K lessons gets fewer of them
        assert operations["maxItems"] == max_items
        assert reasoning + max_items * (lesson["maxLength"] + OP_OVERHEAD_CHARS) + OP_OVERHEAD_CHARS <= max_tokens
        assert lesson["minLength"] <= lesson["maxLength"]
    tiny = operations_schema(max_ops=2, ids=[], max_words=1, max_tokens=192)
    lesson = tiny["properties"]["operations"]["items"]["properties"]["experience"]
    assert lesson["minLength"] <= lesson["maxLength"] == CHARS_PER_WORD
    roomy = operations_schema(max_ops=2, ids=[], max_words=32, max_tokens=4096)
    assert roomy["properties"]["operations"]["items"]["properties"]["experience"]["maxLength"] == 32 * CHARS_PER_WORD


def test_compare_report_lists_the_learned_experiences(tmp_path):
    from tests.helpers.eval_runs import STRONG, WEAK, synthetic_samples, write_eval_run
    from tfgrpo.eval.compare import compare_runs

    base = write_eval_run(tmp_path / "base", synthetic_samples(WEAK, seed=1), label="baseline")
    library = write_eval_run(tmp_path / "lib", synthetic_samples(STRONG, seed=2), label="library")
    learn = tmp_path / "learn"
    learn.mkdir()
    steps = [{"step": 1, "epoch": 1, "accuracy": 0.5, "library_size": 1}]
    totals = {"stage_replies_lost": 0, "stage_replies": {"group": {"lost": 0}}}
    (learn / "metrics.json").write_text(json.dumps({"steps": steps, "totals": totals}), encoding="utf-8")
    lib = Library.from_texts(["When counting, list the cases."])
    lib.experiences[0].provenance.step, lib.experiences[0].provenance.query_ids = 1, ["easy-01"]
    lib.experiences[0].provenance.operation = "add"
    lib.save(learn / "library.json")

    comparison, files = compare_runs([base, library], tmp_path / "report", learn_run=learn, n_bootstrap=200)

    markdown = files["markdown"].read_text(encoding="utf-8")
    assert "## Learned experiences (1)" in markdown
    assert "| G0 | When counting, list the cases. | – | add, step 1, from easy-01 |" in markdown
    assert "Stage replies lost" in markdown
