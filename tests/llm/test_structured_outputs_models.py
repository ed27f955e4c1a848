"""Structured outputs with real generation on the embedded SmolLM2 (slow): the stage schema reaches
llama.cpp (its server, and in process) and transformers (constrained decoding), a valid reply comes
back, and a small learn run through each path ends with no lost stage reply."""

from __future__ import annotations

import asyncio
import json

import pytest

from tfgrpo.experiences.model import Library
from tfgrpo.experiences.parse import parse_operations
from tfgrpo.learn.config import LearnConfig
from tfgrpo.learn.loop import learn_async
from tfgrpo.learn.stages import request_operations
from tfgrpo.llm.backends.openai_backend import OpenAIBackend
from tfgrpo.llm.client import LLMClient
from tfgrpo.llm.types import SamplingParams

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def llama_url():
    """llama.cpp's server on SmolLM2 with room for a stage prompt plus its retry (conftest's has 1024)."""
    pytest.importorskip("llama_cpp", reason="needs the llamacpp extra (CI installs it)")
    from tests.helpers.servers import llama_server

    with llama_server(n_ctx=4096) as url:
        yield url


LIBRARY = Library.from_texts(["When a problem says 'more', add the numbers."])
QUESTION = (
    "Two attempts at 'Tom has 7 apples and buys 5 more' answered 12 (right) and 11 (wrong). "
    "Propose at most 2 lessons for the library. Library:\n[G0] When a problem says 'more', add the numbers."
)


async def ask_for_operations(client: LLMClient):
    return await request_operations(
        client,
        [{"role": "user", "content": QUESTION}],
        library=LIBRARY,
        sampling=SamplingParams(temperature=0.0, max_tokens=160),
        tag="group",
        max_words=24,
        max_ops=2,
    )


def assert_valid_enforced(reply) -> None:
    text = reply.attempts[0]["reply"]
    data = json.loads(text)  # strict JSON, as generated
    assert set(data) == {"reasoning", "operations"} and len(data["operations"]) <= 2
    assert parse_operations(text, LIBRARY, max_words=24).ok
    assert reply.enforced and reply.strict and not reply.retried and not reply.lost


def test_llama_server_enforces_the_schema(llama_url):
    client = LLMClient(OpenAIBackend("smollm2", base_url=llama_url), max_retries=0)

    async def run():
        try:
            return await ask_for_operations(client)
        finally:
            await client.aclose()

    assert_valid_enforced(asyncio.run(run()))
    assert not client.schema_fallbacks  # llama.cpp's server takes json_schema


def test_llamacpp_in_process_enforces_the_schema():
    pytest.importorskip("llama_cpp", reason="needs the llamacpp extra (CI installs it)")
    from tfgrpo.llm.backends.llamacpp_backend import LlamaCppBackend

    client = LLMClient(LlamaCppBackend(n_ctx=1024, n_threads=1))

    async def run():
        try:
            return await ask_for_operations(client)
        finally:
            await client.aclose()

    assert_valid_enforced(asyncio.run(run()))


def test_transformers_enforces_the_schema_with_xgrammar():
    from tfgrpo.llm.backends.transformers_backend import TransformersBackend

    backend = TransformersBackend(constrained_decoding="xgrammar")
    assert backend.supports_response_schema
    client = LLMClient(backend)

    async def run():
        try:
            return await ask_for_operations(client)
        finally:
            await client.aclose()

    assert_valid_enforced(asyncio.run(run()))


def small_learn(tmp_path, **llm) -> dict:
    # 5 easy problems x G=3 at temperature 1: SmolLM2 is right about a fifth of the time, so some groups are mixed.
    config = LearnConfig(
        data="easy",
        limit=5,
        out=str(tmp_path / "run"),
        group_size=3,
        epochs=1,
        batch_size=5,
        dedup=False,
        llm=llm,
        rollout_sampling={"temperature": 1.0, "max_tokens": 48, "seed": 3},
        # one lesson: even a reply that fills every string to its bound fits the stage token budget
        stage_sampling={"temperature": 0.0, "max_tokens": 192},
        max_ops_per_group=1,
    )
    result = asyncio.run(learn_async(config))
    assert result.status == "completed"
    return result.metrics["totals"]


def assert_nothing_lost(totals: dict) -> None:
    group = totals["stage_replies"]["group"]
    assert group["replies"] >= 1 and group["enforced"] == group["replies"]
    assert totals["stage_replies_lost"] == 0 and totals["parse_failures"] == 0


def test_learn_through_the_llama_server_loses_no_stage_reply(tmp_path, llama_url):
    assert_nothing_lost(
        small_learn(tmp_path, backend="openai", model="smollm2", base_url=[llama_url], api_key="local")
    )


def test_learn_through_transformers_loses_no_stage_reply(tmp_path):
    assert_nothing_lost(small_learn(tmp_path, backend="transformers"))
