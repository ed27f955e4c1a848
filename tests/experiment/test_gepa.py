"""GEPA as a method of `tfgrpo experiment`, driven through a scripted OpenAI-compatible server
(tests/helpers/gepa_world.py): every call it makes goes through tfgrpo's client layer (counted in the ledger,
cached on a rerun, resumed after a budget stop without paying a call twice), its metric's feedback carries the
reward's reason and the gold answer, its row is recomputed from its eval's samples, and the recipe options
that seed one method from the other."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from pathlib import Path

import pytest
import yaml

from tests.helpers.gepa_world import REFLECTION_MARK, RULE, GepaWorld
from tests.helpers.learn_world import WorldServer, read_jsonl, write_problems
from tfgrpo.core.config import ConfigError
from tfgrpo.core.lockout import TestSetOverlapError
from tfgrpo.experiment.plan import build_plan
from tfgrpo.experiment.recipe import load_recipe
from tfgrpo.experiment.runner import run_experiment

pytestmark = pytest.mark.timeout(300)


def write_recipe(tmp_path: Path, base_url: str, **sections) -> Path:
    train = write_problems(tmp_path / "train.jsonl", [(1, 2), (3, 4), (5, 5)])
    evalset = write_problems(tmp_path / "eval.jsonl", [(5, 6), (7, 8), (9, 1), (2, 2)])
    recipe = {
        "name": "gepa-tiny",
        "model": {
            "backend": "openai",
            "model": "world",
            "base_url": base_url,
            "api_key": "sk-test-secret",
            "concurrency": 4,
            "price_input_per_1m": 1.0,
            "price_output_per_1m": 1.0,
        },
        "gepa": {
            "data": str(train),
            "settings": {"max_metric_calls": 12, "reflection_minibatch_size": 2, "sampling": {"max_tokens": 64}},
        },
        "evals": {"arith": {"data": str(evalset), "samples": 2}},
        "eval_defaults": {"sampling": {"max_tokens": 64}},
        **sections,
    }
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe), encoding="utf-8")
    return path


def sent_calls(out: Path) -> int:
    """Calls the ledgers of the GEPA run (all sessions) and of every eval say were sent to the server."""
    gepa = json.loads((out / "gepa" / "metrics.json").read_text())
    evals = [json.loads(p.read_text()) for p in (out / "eval").glob("*/*/metrics.json")]
    return gepa["totals"]["calls_sent"] + sum(m["usage"]["total"]["calls"] for m in evals)


def cached_samples(path: Path) -> int:
    with sqlite3.connect(path) as connection:
        return connection.execute("SELECT COUNT(*) FROM completions").fetchone()[0]


def test_gepa_runs_through_the_client_layer_and_its_row_comes_from_its_eval(tmp_path):
    with WorldServer(GepaWorld()) as server:
        recipe = load_recipe(str(write_recipe(tmp_path, server.base_url)))
        out = tmp_path / "exp"
        result = run_experiment(recipe, out)
        assert result.status == "completed", result.message
        # every request the server saw is one the client layer sent and counted
        assert sent_calls(out) == len(server.bodies)
        metrics = json.loads((out / "gepa" / "metrics.json").read_text())
        ledger = metrics["sessions"][-1]["ledger"]["by_tag"]
        # a metric call is a sample sent, or the same (prompt, problem) sample again from the response cache
        task = ledger["gepa_task"]
        assert task["calls"] + task["cached_samples"] == metrics["totals"]["metric_calls"] >= 12
        assert ledger["gepa_reflection"]["calls"] == metrics["totals"]["reflections"] >= 1
        assert metrics["totals"]["cost_usd"] > 0 and metrics["saw"]["val"] == "the training problems"
        # the reflection read the reward's reason and the gold answer of the training problem
        reflections = [b for b in server.bodies if REFLECTION_MARK in b["messages"][-1]["content"]]
        assert any("The correct answer is 3." in b["messages"][-1]["content"] for b in reflections)
        prompt = (out / "gepa" / "system_prompt.txt").read_text()
        assert RULE in prompt and (out / "report" / "system_prompt-gepa.txt").read_text() == prompt
        # the GEPA row: the eval of that very prompt, its Mean@K recomputed from the samples
        samples = read_jsonl(out / "eval" / "arith" / "gepa" / "samples.jsonl")
        assert {s["messages"][0]["content"] for s in samples} == {prompt.strip()}
        table = json.loads((out / "report" / "table.json").read_text())
        row = next(r for r in table["rows"] if r[0] == "GEPA")
        mean = 100 * sum(s["reward"] for s in samples) / len(samples)
        assert row[1].startswith(f"{mean:.1f} [") and mean == 100.0
        base = next(r for r in table["rows"] if r[0] == "base")
        assert base[1].startswith("50.0 [") and re.match(r"\+50\.0 \(p=", row[2])  # base: every other sample right
        assert "gepa" in (out / "report" / "report.md").read_text().lower()
        assert "What each method saw" in (out / "report" / "report.md").read_text()

        # cached on a rerun: a fresh experiment state over the same folders sends nothing
        sent = len(server.bodies)
        (out / "experiment.json").unlink()
        shutil.rmtree(out / "gepa" / "gepa")  # GEPA's own state too: it replays every call from the cache
        again = run_experiment(recipe, out)
        assert again.status == "completed" and len(server.bodies) == sent
        assert (out / "gepa" / "system_prompt.txt").read_text() == prompt


def test_a_budget_stop_in_gepa_resumes_without_paying_a_call_twice(tmp_path):
    with WorldServer(GepaWorld()) as server:
        recipe = load_recipe(str(write_recipe(tmp_path, server.base_url)))
        out = tmp_path / "exp"
        stopped = run_experiment(recipe, out, budget_usd=0.0002)
        assert stopped.status == "budget_exceeded"
        first = json.loads((out / "gepa" / "metrics.json").read_text())
        assert first["status"] == "budget_exceeded" and 0 < first["totals"]["calls_sent"]
        state = json.loads((out / "experiment.json").read_text())
        assert state["steps"]["gepa"]["cost_usd"] == pytest.approx(first["totals"]["cost_usd"])
        resumed = run_experiment(recipe, out)
        assert resumed.status == "completed"
        metrics = json.loads((out / "gepa" / "metrics.json").read_text())
        assert [s["status"] for s in metrics["sessions"]] == ["budget_exceeded", "completed"]
        # every call sent over both sessions is a distinct sample in the response cache: none was sent twice
        assert metrics["totals"]["calls_sent"] == cached_samples(out / "gepa" / "cache.sqlite")
        assert metrics["totals"]["calls_sent"] + sum(
            json.loads(p.read_text())["usage"]["total"]["calls"] for p in (out / "eval").glob("*/*/metrics.json")
        ) == len(server.bodies)


def test_gepa_is_locked_out_of_the_eval_sets(tmp_path):
    recipe = load_recipe(str(write_recipe(tmp_path, "http://127.0.0.1:9/v1")))
    leaky = recipe.model_copy(update={"gepa": recipe.gepa.model_copy(update={"data": str(tmp_path / "eval.jsonl")})})
    with pytest.raises(TestSetOverlapError, match="shares 4 problem"):
        run_experiment(leaky, tmp_path / "exp")


def test_seeding_options_wire_the_two_methods_together(tmp_path):
    learn = {"data": str(tmp_path / "train.jsonl"), "seeds": [7], "settings": {"group_size": 2, "epochs": 1}}
    path = write_recipe(tmp_path, "http://127.0.0.1:9/v1", learn={**learn, "seed_from": "gepa"})
    plan = {step.id: step for step in build_plan(load_recipe(str(path)), tmp_path / "exp")}
    ids = list(plan)
    assert ids.index("gepa") < ids.index("learn/seed-7") and plan["learn/seed-7"].deps == ["gepa"]
    assert plan["learn/seed-7"].config.init_library == str(tmp_path / "exp" / "gepa" / "library.json")

    path = write_recipe(tmp_path, "http://127.0.0.1:9/v1", learn=learn)
    recipe = load_recipe(str(path), ["gepa.seed_from=learn:7"])
    plan = {step.id: step for step in build_plan(recipe, tmp_path / "exp")}
    assert plan["gepa"].deps == ["learn/seed-7"]
    assert plan["gepa"].config.seed_library == str(tmp_path / "exp" / "learn" / "seed-7" / "library.json")
    assert plan["eval/arith/gepa"].deps == ["gepa"]

    with pytest.raises(ConfigError, match="name each other"):
        load_recipe(str(path), ["gepa.seed_from=learn", "learn.seed_from=gepa"])
    with pytest.raises(ConfigError, match="not among learn.seeds"):
        build_plan(load_recipe(str(path), ["gepa.seed_from=learn:8"]), tmp_path / "exp")


def test_gepa_seeded_from_a_library_starts_from_its_system_prompt(tmp_path):
    from tfgrpo.experiences import Library
    from tfgrpo.experiences.export import export_text
    from tfgrpo.experiment.gepa_config import GepaConfig
    from tfgrpo.experiment.gepa_run import seed_prompt

    library = Library.from_texts(["Check the carry.", "Write the answer in a box."])
    library.save(tmp_path / "library.json")
    config = GepaConfig(data="easy_train", seed_library=str(tmp_path / "library.json"))
    assert seed_prompt(config) == export_text(library, "system-prompt").strip()
    assert "Check the carry." in seed_prompt(config)


def test_compare_methods_dry_run_prints_the_plan_and_an_estimate_per_method(tmp_path):
    import io

    from rich.console import Console

    from tfgrpo.experiment.estimate import estimate_by_method, estimate_step

    recipe = load_recipe("compare-methods")
    buffer = io.StringIO()
    result = run_experiment(recipe, tmp_path / "cm", dry_run=True, console=Console(file=buffer, width=200))
    assert result.status == "planned" and not (tmp_path / "cm").exists()
    printed = buffer.getvalue()
    assert "Estimate per method" in printed and "eval/aime24/gepa" in printed
    plan = build_plan(recipe, tmp_path / "cm")
    by_method = estimate_by_method(plan, {step.id: estimate_step(step, recipe.estimate) for step in plan})
    assert set(by_method) == {"base", "Training-Free GRPO", "GEPA", "sft (sft)", "grpo (grpo)"}
    evals = 2 * 30 * 16  # two AIME sets of 30 problems at K = 16, for every method alike
    assert by_method["base"].calls == evals
    gepa = by_method["GEPA"].calls - evals  # its metric calls and the reflections they imply
    assert recipe.gepa.settings["max_metric_calls"] < gepa < 1.1 * recipe.gepa.settings["max_metric_calls"]
    for method, estimate in by_method.items():
        assert f"{estimate.calls:,}" in printed, method


async def test_a_stopped_bridge_makes_no_further_call_from_gepas_thread():
    import asyncio

    from tfgrpo.experiment.gepa_adapter import LoopBridge, RunStopped

    calls = []

    async def call() -> int:
        calls.append(1)
        return 7

    bridge = LoopBridge(asyncio.get_running_loop())
    assert await asyncio.to_thread(bridge.run, call()) == 7 and not bridge.stopped()
    bridge.stop()  # what a Ctrl-C in the caller does: GEPA's stop condition is now true
    with pytest.raises(RunStopped):
        await asyncio.to_thread(bridge.run, call())
    assert bridge.stopped() and calls == [1]
