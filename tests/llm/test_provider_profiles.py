"""Provider profiles, one request at a time: what each family's profile knows (from its documentation), what
the backend sends for it, what it learns from a refusal or a first reply, and where it reads reasoning.
Whole `learn` runs through the same local servers: tests/llm/test_provider_learn.py."""

from __future__ import annotations

import asyncio

import pytest

from tests.helpers.learn_world import World
from tests.helpers.providers import CACHED_TOKENS, THOUGHT, AnthropicServer, ProviderServer
from tests.helpers.servers import ask
from tfgrpo.llm.backends.openai_backend import OpenAIBackend
from tfgrpo.llm.backends.profiles import (
    ANTHROPIC,
    DEEPSEEK_CHAT,
    DEEPSEEK_REASONER,
    GENERIC,
    LLAMACPP,
    OPENAI,
    OPENAI_REASONING,
    PROFILES,
    VLLM,
    ProviderProfile,
    learn_from_refusal,
    profile_for,
)
from tfgrpo.llm.client import LLMClient
from tfgrpo.llm.errors import BackendUnavailableError, InvalidRequestError, ServerError
from tfgrpo.llm.reasoning import split_think_block
from tfgrpo.llm.types import ResponseSchema, SamplingParams

pytestmark = pytest.mark.timeout(120)

SAMPLED = SamplingParams(temperature=0.7, top_p=0.9, max_tokens=64, seed=5)
TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}]
SCHEMA = ResponseSchema(name="answer", schema={"type": "object", "properties": {"a": {"type": "string"}}})


@pytest.mark.parametrize(
    ("model", "base_url", "expected"),
    [
        ("o3-mini", "http://127.0.0.1:1/v1", "openai-reasoning"),
        ("o1", "https://api.openai.com/v1", "openai-reasoning"),
        ("openai/gpt-5-mini", "http://litellm", "openai-reasoning"),
        ("gpt-5.1", "https://api.openai.com/v1", "openai-reasoning"),
        ("gpt-5-chat-latest", "https://api.openai.com/v1", "openai"),
        ("gpt-4o-mini", "https://api.openai.com/v1", "openai"),
        ("gpt-4o-mini", "http://127.0.0.1:8000/v1", "openai"),  # OpenAI's model behind a proxy
        ("openai/gpt-4o-mini", "litellm:openai/gpt-4o-mini", "openai"),
        ("openai/gpt-4o-mini", "https://openrouter.ai/api/v1", "openai-compatible"),  # a prefix says nothing
        ("deepseek-reasoner", "https://api.deepseek.com", "deepseek-reasoner"),
        ("deepseek-chat", "https://api.deepseek.com", "deepseek-chat"),
        ("deepseek/deepseek-chat", "litellm:deepseek/deepseek-chat", "deepseek-chat"),
        ("anthropic/claude-sonnet-4-5", "litellm:anthropic/claude-sonnet-4-5", "anthropic"),
        ("claude-opus-4-1", "http://gateway/v1", "anthropic"),
        ("hosted_vllm/Qwen/Qwen3-8B", "http://gpu1:8000/v1", "vllm"),
        ("smollm2", "http://127.0.0.1:8000/v1", "openai-compatible"),
        ("Qwen/o3-lookalike", "http://127.0.0.1:8000/v1", "openai-compatible"),
    ],
)
def test_the_profile_comes_from_the_model_name_where_it_is_unambiguous(model, base_url, expected):
    assert profile_for(model, base_url).name == expected


@pytest.mark.parametrize(
    ("profile", "facts"),
    [
        (OPENAI_REASONING, dict(token_limit_field="max_completion_tokens", sampling_fields=(), reasoning_fields=())),
        (OPENAI, dict(token_limit_field="max_completion_tokens", sends_n=True, sends_seed=True, tools=True)),
        (
            DEEPSEEK_REASONER,
            dict(
                sampling_fields=(), sends_n=False, sends_seed=False, tools=False, first_response_format="json_object"
            ),
        ),
        (
            DEEPSEEK_CHAT,
            dict(sends_n=False, sends_seed=False, tools=True, cached_tokens_field="prompt_cache_hit_tokens"),
        ),
        (VLLM, dict(sends_n=True, reasoning_fields=("reasoning", "reasoning_content"), reasoning_tokens_field=None)),
        (LLAMACPP, dict(sends_n=False, reasoning_fields=("reasoning_content", "reasoning"), think_in_content=True)),
        (ANTHROPIC, dict(sampling_fields=("temperature",), sends_n=False, sends_seed=False, think_in_content=False)),
        (GENERIC, dict(token_limit_field="max_tokens", sampling_fields=("temperature", "top_p"), sends_n=True)),
    ],
    ids=lambda value: value.name if isinstance(value, ProviderProfile) else "",
)
def test_each_family_knows_its_documented_rules(profile, facts):
    assert {key: getattr(profile, key) for key in facts} == facts
    assert profile is GENERIC or profile.source.startswith("https://")  # each rule cites its page


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name)
def test_a_parameter_the_profile_leaves_out_is_never_sent(profile):
    backend = OpenAIBackend("m", base_url="http://127.0.0.1:1/v1")
    backend.remember(profile)
    arguments = backend._arguments(ask(n=3, sampling=SAMPLED, response_schema=SCHEMA), n=3, sample=0)
    assert (
        profile.token_limit_field in arguments and len({"max_tokens", "max_completion_tokens"} & set(arguments)) == 1
    )
    assert {"temperature", "top_p"} & set(arguments) == set(profile.sampling_fields)
    assert ("n" in arguments, "seed" in arguments) == (profile.sends_n, profile.sends_seed)
    assert arguments["response_format"]["type"] == profile.first_response_format
    assert backend.supports_tools == profile.tools and backend.ignores_n == (not profile.sends_n)


def test_a_tool_call_request_to_a_profile_without_tools_is_refused_in_one_line():
    backend = OpenAIBackend("deepseek-reasoner", base_url="https://api.deepseek.com")
    assert not backend.supports_tools  # the agent's protocol "auto" picks text tool calls here
    with pytest.raises(BackendUnavailableError, match="does not support tool calling.*agent.protocol: text"):
        backend._arguments(ask(tools=TOOLS), n=1, sample=0)


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
    ("error", "rule", "changed"),
    [
        (
            ServerError("Only one completion choice is allowed", status=500),
            "one request per sample",
            {"sends_n": False},
        ),
        (
            InvalidRequestError(
                "`temperature` and `top_p` cannot both be specified for this model. Please use only one."
            ),
            "temperature only",
            {"sampling_fields": ("temperature",)},
        ),
        (InvalidRequestError("Unsupported parameter: 'seed' is not supported"), "no seed", {"sends_seed": False}),
    ],
)
def test_refusals_of_n_sampling_pairs_and_seed_are_learned(error, rule, changed):
    learned = learn_from_refusal(GENERIC, error)
    assert learned is not None and learned.learned == (rule,)
    assert {key: getattr(learned, key) for key in changed} == changed
    assert learn_from_refusal(learned, error) is None
    assert learn_from_refusal(GENERIC, ServerError("upstream overloaded", status=503)) is None


def test_a_server_without_max_completion_tokens_is_learned_back_to_max_tokens_once():
    refusal = InvalidRequestError("1 validation error: max_completion_tokens: Extra inputs are not permitted")
    learned = learn_from_refusal(OPENAI, refusal)
    assert learned is not None and learned.token_limit_field == "max_tokens"
    again = InvalidRequestError("'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.")
    assert learn_from_refusal(learned.learn("max_completion_tokens"), again) is None  # never back and forth


def test_a_saved_profile_reads_back_and_a_foreign_record_does_not():
    learned = GENERIC.learn("one request per sample", sends_n=False)
    assert ProviderProfile.from_record(learned.to_record()) == learned
    assert ProviderProfile.from_record({"name": "x", "token_limit_field": "max_words"}) is None
    assert ProviderProfile.from_record({"name": "x", "colour": "red", "token_limit_field": "max_tokens"}) is None
    assert ProviderProfile.from_record("openai (max_tokens)") is None
    assert ProviderProfile.from_record({**learned.to_record(), "sends_n": "no"}) is None
    assert ProviderProfile.from_record({**learned.to_record(), "name": None}) is None
    assert ProviderProfile.from_record({**learned.to_record(), "first_response_format": None}) is not None


def test_a_client_remembers_a_profile_only_for_the_same_endpoint_and_model():
    backend = OpenAIBackend("gateway", base_url="http://127.0.0.1:1/v1")
    backend.profile = backend.profile.learn("response_format json_object", first_response_format="json_object")
    records = LLMClient(backend).provider_records()
    fresh, other_model = (OpenAIBackend(m, base_url="http://127.0.0.1:1/v1") for m in ("gateway", "other"))
    assert LLMClient([fresh]).remember_providers(records) == ["http://127.0.0.1:1/v1"]
    assert fresh.profile == backend.profile and fresh.format_level == 2
    assert LLMClient([other_model]).remember_providers(records) == [] and other_model.profile == GENERIC


def forward(backend: OpenAIBackend, *ns: int) -> list[list]:
    """One `forward` per entry of `ns` (its `n`), in order, in one event loop."""

    async def calls() -> list[list]:
        try:
            return [await backend.forward(ask("What is 1+2?", n=n, sampling=SAMPLED)) for n in ns]
        finally:
            await backend.aclose()

    return asyncio.run(calls())


def test_deepseek_gets_one_request_per_sample_no_seed_and_its_cache_hits_counted():
    with ProviderServer(World(), "deepseek-chat") as server:
        [completions] = forward(OpenAIBackend("deepseek-chat", base_url=server.base_url, api_key="k"), 3)
        bodies = list(server.bodies)
    assert len(completions) == 3 and len(bodies) == 3 and server.refusals == []
    assert not [b for b in bodies if "n" in b or "seed" in b]
    assert all(b["temperature"] == 0.7 and b["max_tokens"] == 64 for b in bodies)
    assert [c.usage.cached_prompt_tokens for c in completions] == [CACHED_TOKENS] * 3


def test_llama_cpp_refuses_n_once_and_is_recognised_from_its_reply():
    with ProviderServer(World(), "llamacpp-deepseek") as server:
        backend = OpenAIBackend("served-model", base_url=server.base_url, api_key="k")
        first, second = forward(backend, 3, 3)
        bodies = list(server.bodies)
    assert len(server.refusals) == 1 and "n" in bodies[0]  # "Only one completion choice", then never again
    assert len(first) == len(second) == 3 and all(c.reasoning == THOUGHT and c.text for c in first + second)
    assert not [b for b in bodies[1:] if "n" in b]
    assert backend.profile.name == "llama.cpp"
    assert backend.profile.learned == ("one request per sample", "llama.cpp server (its reply)")


def test_llama_cpp_recognised_on_a_single_sample_is_never_sent_n():
    with ProviderServer(World(), "llamacpp-think") as server:
        backend = OpenAIBackend("served-model", base_url=server.base_url, api_key="k")
        _, completions = forward(backend, 1, 2)
    assert server.refusals == [] and backend.profile.name == "llama.cpp"
    assert [(c.reasoning, "<think>" in c.text) for c in completions] == [(THOUGHT, False)] * 2


def test_vllm_is_recognised_from_its_reply_and_keeps_sending_n():
    with ProviderServer(World(), "vllm-reasoning") as server:
        backend = OpenAIBackend("served-model", base_url=server.base_url, api_key="k")
        [[completion]] = forward(backend, 1)
    assert backend.profile.name == "vllm" and backend.profile.sends_n
    assert completion.reasoning == THOUGHT


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


def reply(message: dict, usage: dict | None = None) -> dict:
    return {
        "choices": [{"message": {"role": "assistant", **message}, "finish_reason": "stop"}],
        "usage": usage or {"prompt_tokens": 3, "completion_tokens": 9},
    }


def test_the_backend_reads_reasoning_from_each_documented_place():
    backend = OpenAIBackend("m", base_url="http://127.0.0.1:1/v1")
    details = {"prompt_tokens": 3, "completion_tokens": 9, "completion_tokens_details": {"reasoning_tokens": 6}}
    [deepseek] = backend._parse(reply({"content": "3", "reasoning_content": "think"}, details), 0.0)
    [openrouter] = backend._parse(reply({"content": "3", "reasoning": "think"}), 0.0)
    [bare] = backend._parse(reply({"content": "<think>think</think>3"}), 0.0)
    [plain] = backend._parse(reply({"content": "3"}), 0.0)
    assert (deepseek.text, deepseek.reasoning, deepseek.usage.reasoning_tokens) == ("3", "think", 6)
    assert (openrouter.text, openrouter.reasoning) == ("3", "think")
    assert (bare.text, bare.reasoning) == ("3", "think")
    assert (plain.text, plain.reasoning, plain.usage.reasoning_tokens) == ("3", None, 0)


def test_a_provider_whose_reasoning_never_comes_in_the_content_keeps_a_literal_think_tag():
    [openai] = OpenAIBackend("gpt-4o-mini", base_url="http://127.0.0.1:1/v1")._parse(
        reply({"content": "<think>is an HTML-like tag</think> in my answer"}), 0.0
    )
    assert (openai.text, openai.reasoning) == ("<think>is an HTML-like tag</think> in my answer", None)


def test_anthropic_through_litellm_gets_temperature_alone_one_request_per_sample_and_thinking_apart(monkeypatch):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from tfgrpo.llm.backends.litellm_backend import LiteLLMBackend
    from tfgrpo.llm.types import ChatRequest, Message

    with AnthropicServer() as server:
        backend = LiteLLMBackend("anthropic/claude-sonnet-4-5", api_base=server.api_base, api_key="k")
        request = ChatRequest(messages=[Message(role="user", content="1+2?")], n=2, sampling=SAMPLED)
        completions = asyncio.run(backend.forward(request))
        bodies = list(server.bodies)
    assert backend.profile.name == "anthropic" and len(bodies) == 2  # no `n` in Anthropic's API: one call each
    assert all(b["temperature"] == 0.7 and "top_p" not in b and b["max_tokens"] == 64 for b in bodies)
    for completion in completions:
        assert (completion.text, completion.reasoning) == ("\\boxed{3}", THOUGHT)
        assert 0 < completion.usage.reasoning_tokens <= completion.usage.completion_tokens == 40
