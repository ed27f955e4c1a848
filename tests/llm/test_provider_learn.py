"""`learn` through local servers that answer like each provider's documentation says: OpenAI's chat and
reasoning models, DeepSeek's chat and reasoner, vLLM's reasoning parser, llama.cpp's server with and without
a reasoning format. No 400 where the model name says the rules, one per rule where it does not (and none
again after `--resume`); the reasoning kept, summarised (head and tail), never graded, counted, priced and
bounded by `--budget-usd`."""

from __future__ import annotations

import json

import pytest

from tests.helpers.learn_world import World, read_jsonl, write_problems
from tests.helpers.providers import CACHED_TOKENS, REASONING_TOKENS, THOUGHT, ProviderServer
from tfgrpo.experiences.limits import approximate_tokens
from tfgrpo.learn.config import LearnConfig
from tfgrpo.learn.loop import LearnResult, learn
from tfgrpo.learn.stages.summarize import SummaryRequest, fitted_trajectory, summary_messages
from tfgrpo.rollout.sampling import Rollout

pytestmark = pytest.mark.timeout(120)

INPUT, OUTPUT = 1.0, 4.0  # USD per 1M tokens


def learn_config(server: ProviderServer, tmp_path, model: str, **overrides) -> LearnConfig:
    data = write_problems(tmp_path / "train.jsonl", [(1, 2), (3, 4)])
    llm = {
        "backend": "openai",
        "model": model,
        "base_url": server.base_url,
        "api_key": "k",
        "concurrency": 1,
        "price_input_per_1m": INPUT,
        "price_output_per_1m": OUTPUT,
        **overrides.pop("llm", {}),
    }
    fields = dict(data=str(data), out=str(tmp_path / "run"), group_size=2, epochs=1, dedup=False, llm=llm)
    return LearnConfig(**{**fields, **overrides})


def learn_through(server: ProviderServer, tmp_path, model: str, **overrides) -> dict:
    result = learn(learn_config(server, tmp_path, model, **overrides))
    assert result.status == "completed", result.message
    return json.loads((tmp_path / "run" / "metrics.json").read_text())


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


SEEDED = {"temperature": 0.7, "max_tokens": 256, "seed": 11}


@pytest.mark.parametrize(("provider", "model"), [("openai", "gpt-4o-mini"), ("deepseek-chat", "deepseek-chat")])
def test_openai_chat_and_deepseek_chat_runs_get_no_400_and_their_documented_parameters(tmp_path, provider, model):
    with ProviderServer(World(), provider) as server:
        metrics = learn_through(server, tmp_path, model, rollout_sampling=SEEDED)
        bodies = list(server.bodies)
    assert server.refusals == []
    rollouts = [b for b in bodies if "<trajectory>" not in b["messages"][0]["content"] and "response_format" not in b]
    structured = [b["response_format"]["type"] for b in bodies if "response_format" in b]
    assert rollouts and structured and not [b for b in bodies if "n" in b]
    if provider == "openai":  # max_tokens is deprecated there; n, seed and strict JSON schema are documented
        assert all("max_completion_tokens" in b and "max_tokens" not in b and "top_p" in b for b in bodies)
        assert all(b["seed"] >= 11 for b in rollouts) and set(structured) == {"json_schema"}
    else:  # no seed among DeepSeek's parameters, JSON mode only
        assert all("max_tokens" in b and "seed" not in b and "temperature" in b for b in bodies)
        assert set(structured) == {"json_object"}
    totals = metrics["totals"]
    assert totals["cached_prompt_tokens"] == CACHED_TOKENS * len(bodies)  # from each provider's own field
    assert [profile.split(" ")[0] for profile in totals["providers"].values()] == [provider]


@pytest.mark.parametrize(
    ("provider", "profile"),
    [
        ("deepseek-reasoner", "deepseek-reasoner"),
        ("vllm-reasoning", "vllm"),
        ("llamacpp-think", "llama.cpp"),
        ("llamacpp-deepseek", "llama.cpp"),
    ],
)
def test_reasoning_is_kept_summarised_and_never_graded(tmp_path, provider, profile):
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
    if not provider.startswith("llamacpp"):  # llama.cpp reports no reasoning-token count
        assert metrics["totals"]["reasoning_tokens"] == REASONING_TOKENS * len(bodies)
    assert [line.split(" ")[0] for line in metrics["totals"]["providers"].values()] == [profile]


def test_a_resumed_run_starts_from_the_learned_profile_and_pays_no_400_again(tmp_path):
    with ProviderServer(World(), "openai-reasoning") as server:
        config = learn_config(server, tmp_path, "our-gateway-model")
        assert learn(config).status == "completed" and len(server.refusals) == 2
        first_bodies = len(server.bodies)
        resumed = learn(config.model_copy(update={"resume": True, "epochs": 2}))  # a new epoch: new requests
        new_bodies = server.bodies[first_bodies:]
    assert resumed.status == "completed", resumed.message
    assert len(server.refusals) == 2  # none in the resumed session
    assert new_bodies and all("max_completion_tokens" in b and "temperature" not in b for b in new_bodies)
    sessions = json.loads((tmp_path / "run" / "state.json").read_text())["sessions"]
    assert sessions[0]["provider_profiles"][server.base_url]["profile"]["token_limit_field"] == "max_completion_tokens"
    assert sessions[-1]["provider_profiles"] == sessions[0]["provider_profiles"]
    assert "provider profiles remembered from the last session" in (tmp_path / "run" / "events.log").read_text()


def long_rollout() -> Rollout:
    reasoning = "HEAD-OF-THE-PLAN: add the units first. " + "then I check again, " * 3000 + "TAIL: so it is 3."
    return Rollout("q", 0, [], completion="The answer is \\boxed{3}", reasoning=reasoning)


@pytest.mark.parametrize("budget", [64, 256, 2048])
def test_stage_one_keeps_the_head_and_tail_of_a_long_reasoning_and_the_whole_answer(budget):
    rollout = long_rollout()
    [message], truncated = summary_messages(
        SummaryRequest(rollout, "What is 1+2?", "", "3"), template="summarize", token_budget=budget
    )
    assert truncated
    for kept in ("HEAD-OF-THE-PLAN", "TAIL: so it is 3.", "[answer]\nThe answer is \\boxed{3}", "omitted"):
        assert kept in message["content"]
    assert message["content"].count("then I check again") < 3000 * budget // 2048  # the middle went


@pytest.mark.parametrize("budget", [64, 256, 2048])
def test_stage_one_trim_fits_the_token_budget(budget):
    trimmed, truncated = fitted_trajectory(long_rollout(), budget)
    assert truncated and approximate_tokens(trimmed) <= budget


def run_with_budget(tmp_path, reasoning_tokens: int, budget_usd: float) -> LearnResult:
    tmp_path.mkdir()
    with ProviderServer(World(), "openai-reasoning", reasoning_tokens=reasoning_tokens) as server:
        return learn(learn_config(server, tmp_path, "o3-mini", llm={"budget_usd": budget_usd}))


def test_the_budget_stops_a_run_that_reasoning_tokens_push_over_it(tmp_path):
    plain = run_with_budget(tmp_path / "plain", reasoning_tokens=0, budget_usd=1.0)
    assert plain.status == "completed"
    spent = plain.metrics["totals"]["cost_usd"]
    budget = spent * 3  # three times what the answers cost: only the reasoning can reach it
    reasoned = run_with_budget(tmp_path / "reasoned", reasoning_tokens=2000, budget_usd=budget)
    assert reasoned.status == "budget_exceeded" and "budget" in reasoned.message
    totals = reasoned.metrics["totals"]
    assert totals["reasoning_tokens"] > 0 and totals["cost_usd"] >= budget
    assert totals["cost_usd"] < budget + 2 * 2000 * OUTPUT / 1e6  # stopped within a call or two of the cap
