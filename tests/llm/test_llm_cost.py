"""Cost priced right: prompt tokens a provider served from its prompt cache are read from every reply
shape that reports them, priced at the cached rate, counted in metrics.json and held to the budget."""

from __future__ import annotations

import asyncio
import json

import pytest
from openai.types import CompletionUsage

from tests.helpers.learn_world import World, WorldServer, write_problems
from tests.helpers.servers import FaultServer, Reply, ask, completion_body
from tfgrpo.core.metrics import summarize
from tfgrpo.eval.compare import build_comparison, load_eval_run
from tfgrpo.eval.report import build_tables
from tfgrpo.learn.config import LearnConfig
from tfgrpo.learn.loop import learn
from tfgrpo.llm.accounting import Pricing, resolve_pricing
from tfgrpo.llm.backends.litellm_backend import LiteLLMBackend
from tfgrpo.llm.backends.openai_backend import OpenAIBackend
from tfgrpo.llm.backends.usage import cached_prompt_tokens, share_usage
from tfgrpo.llm.client import LLMClient
from tfgrpo.llm.errors import BudgetExceededError

# USD per 1M tokens: full input, cached input, output (cached = a tenth, as DeepSeek and OpenAI bill it)
INPUT, CACHED, OUTPUT = 1.0, 0.1, 2.0


def test_cached_tokens_are_read_from_every_reply_shape():
    openai_sdk = CompletionUsage.model_validate(
        {
            "prompt_tokens": 1000,
            "completion_tokens": 5,
            "total_tokens": 1005,
            "prompt_tokens_details": {"cached_tokens": 768},
        }
    )
    deepseek_sdk = CompletionUsage.model_validate(  # the SDK keeps DeepSeek's own fields as extras
        {
            "prompt_tokens": 1000,
            "completion_tokens": 5,
            "total_tokens": 1005,
            "prompt_cache_hit_tokens": 640,
            "prompt_cache_miss_tokens": 360,
        }
    )
    assert cached_prompt_tokens(openai_sdk) == 768
    assert cached_prompt_tokens(deepseek_sdk) == 640
    assert (
        cached_prompt_tokens({"prompt_tokens": 9, "prompt_tokens_details": {"cached_tokens": 4}}) == 4
    )  # llama.cpp, dicts
    assert cached_prompt_tokens({"prompt_tokens": 9, "cache_read_input_tokens": 3}) == 3  # Anthropic through litellm
    assert cached_prompt_tokens({"prompt_tokens": 9, "prompt_tokens_details": None}) == 0
    assert cached_prompt_tokens(None) == 0
    shares = share_usage(1001, 10, 2, cached_prompt_tokens=501)
    assert [s.cached_prompt_tokens for s in shares] == [251, 250] and sum(s.prompt_tokens for s in shares) == 1001


def test_cached_tokens_are_priced_at_the_cached_rate():
    pricing = Pricing(INPUT, OUTPUT, cached_input_per_1m=CACHED)
    assert pricing.cost(1000, 10, 900) == pytest.approx((100 * INPUT + 900 * CACHED + 10 * OUTPUT) / 1e6)
    assert Pricing(INPUT, OUTPUT).cost(1000, 10, 900) == pytest.approx(
        (1000 * INPUT + 10 * OUTPUT) / 1e6
    )  # no cached rate: full price
    # litellm's bundled table gives the provider's cached rate (DeepSeek bills cache hits at a fraction of the input price)
    deepseek = resolve_pricing("deepseek/deepseek-chat", None, None, local=False)
    assert deepseek.known and deepseek.cached_input_per_1m is not None
    assert 0 < deepseek.cached_input_per_1m < deepseek.input_per_1m
    assert resolve_pricing("x", INPUT, OUTPUT, local=False, cached_input_per_1m=CACHED).cached_input_per_1m == CACHED


def cached_reply(prompt_tokens: int, cached: int) -> Reply:
    body = completion_body({"model": "m"})
    body["usage"] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": 0,
        "total_tokens": prompt_tokens,
        "prompt_tokens_details": {"cached_tokens": cached},
    }
    return Reply(body=body)


def test_the_budget_stops_at_the_cached_price(fault_server: FaultServer):
    # 1000 prompt tokens, 900 from the provider's cache: 190 micro-USD a call at the cached rate, 1000 at the full one.
    fault_server.default = cached_reply(1000, 900)
    per_call = (100 * INPUT + 900 * CACHED) / 1e6
    client = LLMClient(
        OpenAIBackend("m", base_url=fault_server.base_url, api_key="k"),
        pricing=Pricing(INPUT, OUTPUT, cached_input_per_1m=CACHED),
        budget_usd=5e-4,
        max_retries=0,
    )

    async def spend() -> int:
        calls = 0
        try:
            while calls < 10:
                await client.chat([{"role": "user", "content": f"question {calls}"}], tag="rollout")
                calls += 1
        except BudgetExceededError:
            return calls
        finally:
            await client.aclose()
        return calls

    calls = asyncio.run(spend())
    assert calls == 3  # full price would stop after 1 call; the cached price allows 3 (5.7e-4 spent)
    totals = client.accounting.snapshot()["by_tag"]["rollout"]
    assert totals["prompt_tokens"] == 3000 and totals["cached_prompt_tokens"] == 2700
    assert client.accounting.cost_usd == pytest.approx(3 * per_call)


class CachingWorldServer(WorldServer):
    """The scripted world, reporting that the first half of every prompt came from the provider's cache."""

    def answer(self, body: dict) -> tuple[int, dict]:
        status, payload = super().answer(body)
        if status == 200:
            usage = payload["usage"]
            usage["prompt_tokens_details"] = {"cached_tokens": usage["prompt_tokens"] // 2}
        return status, payload


@pytest.mark.timeout(120)
def test_learn_metrics_show_cached_tokens_and_their_price(tmp_path):
    data = write_problems(tmp_path / "train.jsonl", [(1, 2), (3, 4)])
    with CachingWorldServer(World()) as server:
        config = LearnConfig(
            data=str(data),
            out=str(tmp_path / "run"),
            group_size=2,
            epochs=1,
            dedup=False,
            llm={
                "backend": "openai",
                "model": "m",
                "base_url": server.base_url,
                "api_key": "k",
                "concurrency": 8,
                "price_input_per_1m": INPUT,
                "price_output_per_1m": OUTPUT,
                "price_cached_input_per_1m": CACHED,
            },
        )
        result = learn(config)
        prompts = [sum(len(str(m.get("content") or "").split()) for m in b["messages"]) for b in server.bodies]
        completions = [len(server.world.reply_for(b["messages"], 0).split()) for b in server.bodies]
    assert result.status == "completed"
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    totals = metrics["totals"]
    cached = sum(p // 2 for p in prompts)
    assert totals["prompt_tokens"] == sum(prompts)
    assert totals["cached_prompt_tokens"] == cached > 0
    assert totals["uncached_prompt_tokens"] == sum(prompts) - cached
    assert metrics["steps"][0]["cached_prompt_tokens"] == cached
    expected = ((sum(prompts) - cached) * INPUT + cached * CACHED + sum(completions) * OUTPUT) / 1e6
    assert totals["cost_usd"] == pytest.approx(expected, rel=1e-4)
    assert metrics["sessions"][-1]["usage"]["total"]["cached_prompt_tokens"] == cached


def test_eval_metrics_and_the_compare_cost_table_show_cached_tokens(tmp_path):
    rows = [
        {
            "problem_id": f"p{i}",
            "sample": s,
            "reward": float(s == 0),
            "extracted": "1",
            "answer": "1",
            "prompt_tokens": 100,
            "cached_prompt_tokens": 80,
            "completion_tokens": 5,
            "cost_usd": 1e-5,
        }
        for i in range(3)
        for s in range(2)
    ]
    metrics = summarize(rows, n_bootstrap=100)
    assert metrics["tokens"]["prompt"] == 600 and metrics["tokens"]["cached_prompt"] == 480
    run = tmp_path / "eval-run"
    run.mkdir()
    (run / "metrics.json").write_text(json.dumps(metrics))
    comparison = build_comparison([load_eval_run(run)], n_bootstrap=100)
    cost = next(t for t in build_tables(comparison) if t.key == "cost")
    assert "600 (480 cached) / 30" in cost.rows[0]


async def test_litellm_reads_cached_tokens_from_the_server(fault_server: FaultServer):
    fault_server.default = cached_reply(1000, 900)
    backend = LiteLLMBackend("openai/m", api_base=fault_server.base_url, api_key="k")
    (completion,) = await backend.forward(ask())
    assert completion.usage.prompt_tokens == 1000 and completion.usage.cached_prompt_tokens == 900
