"""Provider profiles and reasoning: `learn` through servers that answer like OpenAI's reasoning models,
DeepSeek's reasoner, vLLM's reasoning parser and a bare `<think>` model, with no 400 where the model name
says the rules, one learned 400 where it does not, and the reasoning kept, summarised, counted and priced."""

from __future__ import annotations

import json

import pytest

from tests.helpers.learn_world import World, read_jsonl, write_problems
from tests.helpers.providers import REASONING_TOKENS, THOUGHT, AnthropicServer, ProviderServer
from tfgrpo.learn.config import LearnConfig
from tfgrpo.learn.loop import learn
from tfgrpo.llm.backends.openai_backend import OpenAIBackend
from tfgrpo.llm.backends.profiles import ProviderProfile, learn_from_refusal, profile_for
from tfgrpo.llm.errors import InvalidRequestError
from tfgrpo.llm.reasoning import split_think_block

pytestmark = pytest.mark.timeout(120)

INPUT, OUTPUT = 1.0, 4.0  # USD per 1M tokens


def learn_through(server: ProviderServer, tmp_path, model: str):
    data = write_problems(tmp_path / "train.jsonl", [(1, 2), (3, 4)])
    config = LearnConfig(
        data=str(data),
        out=str(tmp_path / "run"),
        group_size=2,
        epochs=1,
        dedup=False,
        llm={
            "backend": "openai",
            "model": model,
            "base_url": server.base_url,
            "api_key": "k",
            "concurrency": 1,
            "price_input_per_1m": INPUT,
            "price_output_per_1m": OUTPUT,
        },
    )
    result = learn(config)
    assert result.status == "completed", result.message
    return json.loads((tmp_path / "run" / "metrics.json").read_text())


@pytest.mark.parametrize(
    ("model", "base_url", "expected"),
    [
        ("o3-mini", "http://127.0.0.1:1/v1", "openai-reasoning"),
        ("o1", "https://api.openai.com/v1", "openai-reasoning"),
        ("openai/gpt-5-mini", "http://litellm", "openai-reasoning"),
        ("gpt-5.1", "https://api.openai.com/v1", "openai-reasoning"),
        ("gpt-5-chat-latest", "https://api.openai.com/v1", "openai"),
        ("gpt-4o-mini", "https://api.openai.com/v1", "openai"),
        ("deepseek-reasoner", "https://api.deepseek.com", "deepseek-reasoner"),
        ("deepseek-chat", "https://api.deepseek.com", "deepseek-chat"),
        ("smollm2", "http://127.0.0.1:8000/v1", "openai-compatible"),
        ("Qwen/o3-lookalike", "http://127.0.0.1:8000/v1", "openai-compatible"),
    ],
)
def test_the_profile_comes_from_the_model_name_where_it_is_unambiguous(model, base_url, expected):
    assert profile_for(model, base_url).name == expected


def test_a_refusal_teaches_the_profile_once_and_only_what_it_names():
    openai_max_tokens = InvalidRequestError(
        "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead."
    )
    learned = learn_from_refusal(ProviderProfile(), openai_max_tokens)
    assert learned is not None and learned.token_limit_field == "max_completion_tokens" and learned.sends_sampling
    assert learn_from_refusal(learned, openai_max_tokens) is None  # already known: no loop
    temperature = InvalidRequestError(
        "Unsupported value: 'temperature' does not support 0.7 with this model. Only the default (1) value is supported."
    )
    sampled = learn_from_refusal(learned, temperature)
    assert sampled is not None and not sampled.sends_sampling
    assert "learned from the server: max_completion_tokens, default sampling only" in sampled.describe()
    assert learn_from_refusal(ProviderProfile(), InvalidRequestError("context length exceeded")) is None


@pytest.mark.parametrize(
    ("content", "reasoning", "answer"),
    [
        ("<think>a plan</think>\n\\boxed{3}", "a plan", "\\boxed{3}"),
        ("  <think>\nplan\n</think>The answer is 3", "plan", "The answer is 3"),
        ("plan opened by the template</think>\n3", "plan opened by the template", "3"),
        ("The answer is 3", None, "The answer is 3"),
        ("<think></think>3", None, "3"),
    ],
)
def test_a_think_block_is_split_from_the_answer(content, reasoning, answer):
    assert split_think_block(content) == (reasoning, answer)


def test_an_openai_reasoning_model_by_name_gets_no_400_and_its_reasoning_tokens_are_priced(tmp_path):
    with ProviderServer(World(), "openai-reasoning") as server:
        metrics = learn_through(server, tmp_path, "o3-mini")
        bodies = list(server.bodies)
    assert server.refusals == []
    assert all("max_completion_tokens" in b and "temperature" not in b and "top_p" not in b for b in bodies)
    totals = metrics["totals"]
    assert totals["reasoning_tokens"] == REASONING_TOKENS * len(bodies)
    assert totals["cost_usd"] == pytest.approx(
        (totals["prompt_tokens"] * INPUT + totals["completion_tokens"] * OUTPUT) / 1e6, rel=1e-4
    )
    assert totals["completion_tokens"] >= totals["reasoning_tokens"]  # part of the completion, priced as output
    assert "openai-reasoning (max_completion_tokens, default sampling only)" in totals["providers"].values()


def test_an_unknown_name_behind_a_reasoning_model_is_learned_from_its_first_refusals(tmp_path):
    with ProviderServer(World(), "openai-reasoning") as server:
        metrics = learn_through(server, tmp_path, "our-gateway-model")
        refusals, bodies = list(server.refusals), list(server.bodies)
    assert len(refusals) == 2  # one per rule (max_tokens, then temperature), then never again
    accepted = bodies[2:]
    assert accepted and all("max_completion_tokens" in b and "temperature" not in b for b in accepted)
    [profile] = metrics["totals"]["providers"].values()
    assert "learned from the server: max_completion_tokens, default sampling only" in profile
    rollouts = read_jsonl(tmp_path / "run" / "rollouts.jsonl")
    assert all(row["error"] is None for row in rollouts)


@pytest.mark.parametrize("provider", ["deepseek-reasoner", "vllm-reasoning", "llamacpp-think"])
def test_reasoning_is_kept_summarised_and_never_graded(tmp_path, provider):
    model = "deepseek-reasoner" if provider == "deepseek-reasoner" else "served-model"
    with ProviderServer(World(), provider) as server:
        metrics = learn_through(server, tmp_path, model)
        bodies = list(server.bodies)
    assert server.refusals == []  # DeepSeek: JSON mode from the name, reasoning never sent back
    rollouts = read_jsonl(tmp_path / "run" / "rollouts.jsonl")
    assert rollouts and all(row["reasoning"] == THOUGHT for row in rollouts)
    assert all("<think>" not in row["completion"] and "99" not in row["completion"] for row in rollouts)
    # even samples are right in the scripted world: graded on the answer, not on the "99" in the thought
    assert [row["reward"] for row in sorted(rollouts, key=lambda r: (r["query_id"], r["sample"]))] == [1.0, 0.0] * 2
    summaries = [b for b in bodies if "<trajectory>" in b["messages"][0]["content"]]
    assert summaries and all(THOUGHT in b["messages"][0]["content"] for b in summaries)
    assert all("[answer]" in b["messages"][0]["content"] for b in summaries)
    if provider != "llamacpp-think":  # a bare think block comes with no token count
        assert metrics["totals"]["reasoning_tokens"] == REASONING_TOKENS * len(bodies)


def test_the_backend_reads_reasoning_from_each_documented_place():
    backend = OpenAIBackend("m", base_url="http://127.0.0.1:1/v1")

    def reply(message: dict, usage: dict | None = None) -> dict:
        return {
            "choices": [{"message": {"role": "assistant", **message}, "finish_reason": "stop"}],
            "usage": usage or {"prompt_tokens": 3, "completion_tokens": 9},
        }

    details = {"prompt_tokens": 3, "completion_tokens": 9, "completion_tokens_details": {"reasoning_tokens": 6}}
    [deepseek] = backend._parse(reply({"content": "3", "reasoning_content": "think"}, details), 0.0)
    [openrouter] = backend._parse(reply({"content": "3", "reasoning": "think"}), 0.0)
    [bare] = backend._parse(reply({"content": "<think>think</think>3"}), 0.0)
    [plain] = backend._parse(reply({"content": "3"}), 0.0)
    assert (deepseek.text, deepseek.reasoning, deepseek.usage.reasoning_tokens) == ("3", "think", 6)
    assert (openrouter.text, openrouter.reasoning) == ("3", "think")
    assert (bare.text, bare.reasoning) == ("3", "think")
    assert (plain.text, plain.reasoning, plain.usage.reasoning_tokens) == ("3", None, 0)


def test_anthropic_thinking_through_litellm_is_kept_apart_from_the_answer(monkeypatch):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import asyncio

    from tfgrpo.llm.backends.litellm_backend import LiteLLMBackend
    from tfgrpo.llm.types import ChatRequest, Message

    with AnthropicServer() as server:
        backend = LiteLLMBackend("anthropic/claude-sonnet-4-5", api_base=server.api_base, api_key="k")
        [completion] = asyncio.run(backend.forward(ChatRequest(messages=[Message(role="user", content="1+2?")])))
        [body] = server.bodies
    assert body["max_tokens"] == 512 and "max_completion_tokens" not in body  # the generic profile
    assert (completion.text, completion.reasoning) == ("\\boxed{3}", THOUGHT)
    assert 0 < completion.usage.reasoning_tokens <= completion.usage.completion_tokens == 40
