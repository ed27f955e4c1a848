"""`tfgrpo experiment` end to end against the scripted OpenAI-compatible world (tests/helpers/learn_world.py):
the whole table, resume after kill -9 without repeating paid calls, a changed K reruns only the evals
and the report, the budget cap, overrides, and the bundled recipes' dry runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tests.helpers.learn_world import World, WorldServer, write_problems
from tfgrpo.cli.app import app, main
from tfgrpo.experiment.estimate import estimate_step
from tfgrpo.experiment.plan import build_plan
from tfgrpo.experiment.recipe import BUNDLED_RECIPES, load_recipe

pytestmark = pytest.mark.timeout(300)


def write_recipe(
    tmp_path: Path, base_url: str, *, seeds=(1, 2), finetunes: dict | None = None, price: float = 1.0
) -> Path:
    train = write_problems(tmp_path / "train.jsonl", [(1, 2), (3, 4)])
    evalset = write_problems(tmp_path / "eval.jsonl", [(5, 6), (7, 8), (9, 1)])
    recipe = {
        "name": "tiny",
        "model": {
            "backend": "openai",
            "model": "world",
            "base_url": base_url,
            "api_key": "sk-test-secret",
            "concurrency": 4,
            "price_input_per_1m": price,
            "price_output_per_1m": price,
        },
        "learn": {
            "data": str(train),
            "seeds": list(seeds),
            "settings": {
                "group_size": 2,
                "epochs": 1,
                "batch_size": 1,
                "dedup": False,
                "rollout_sampling": {"max_tokens": 64},
                "stage_sampling": {"max_tokens": 64},
            },
        },
        "evals": {"arith": {"data": str(evalset), "samples": 2}},
        "eval_defaults": {"sampling": {"max_tokens": 64}},
        "finetunes": finetunes or {},
    }
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe), encoding="utf-8")
    return path


def run(*args: object):
    return CliRunner().invoke(app, ["experiment", *[str(a) for a in args]])


def state(out: Path) -> dict:
    return json.loads((out / "experiment.json").read_text())


def last_actions(out: Path) -> dict[str, str]:
    return state(out)["runs"][-1]["actions"]


def test_whole_recipe_makes_the_table_then_reruns_only_what_changed(tmp_path):
    from tests.helpers.tiny_models import tiny_model_dir

    tiny = tiny_model_dir(tmp_path / "tiny", "qwen2")
    sft = {
        "method": "sft",
        "model": str(tiny),
        "data": "learn",
        "options": {"peft": "lora", "max_steps": 2, "per_device_train_batch_size": 2},
        "eval_llm": {"batch_size": 8},
    }
    out = tmp_path / "exp"
    with WorldServer(World()) as server:
        recipe = write_recipe(tmp_path, server.base_url, finetunes={"sft": sft})
        result = run(recipe, "--out", out)
        assert result.exit_code == 0, result.output
        table = json.loads((out / "report" / "table.json").read_text())
        labels = [row[0] for row in table["rows"]]
        assert labels == ["base", "library seed 1", "library seed 2", "library pooled (2 seeds)", "sft"]
        assert table["headers"][1:3] == ["arith Mean@2 [95% CI]", "arith Δ vs base (p)"]
        assert all("p=" in row[2] for row in table["rows"][1:])
        for name in ("report.md", "report.html", "accuracy.png", "arith/report.md", "arith/comparison.json"):
            assert (out / "report" / name).is_file(), name
        assert "library pooled (2 seeds)" in (out / "report" / "report.md").read_text()
        # pooled Mean@K is the seeds' average (same K, same problems)
        comparison = json.loads((out / "report" / "arith" / "comparison.json").read_text())
        means = {s["name"]: s["mean_at_k"] for s in comparison["systems"]}
        assert means["library pooled (2 seeds)"] == pytest.approx(
            (means["library seed 1"] + means["library seed 2"]) / 2
        )
        assert (out / "finetune" / "sft" / "adapter_config.json").is_file()
        leaks = [p for p in out.rglob("*") if p.is_file() and b"sk-test-secret" in p.read_bytes()]
        assert not leaks  # the API key reaches no file: recipe.yaml, configs, metrics, caches, state
        assert set(last_actions(out).values()) == {"ran"}

        # the same command again: every step complete with the same settings, no request at all
        before = len(server.bodies)
        again = run(recipe, "--out", out)
        assert again.exit_code == 0, again.output
        assert len(server.bodies) == before and set(last_actions(out).values()) == {"skipped"}

        # a changed eval K reruns the evals and the report only
        changed = run(recipe, "--out", out, "--set", "evals.arith.samples=3")
        assert changed.exit_code == 0, changed.output
        actions = last_actions(out)
        assert {k for k, v in actions.items() if v == "ran"} == {k for k in actions if k.startswith("eval/")} | {
            "report"
        }
        assert all(v == "skipped" for k, v in actions.items() if k.startswith(("learn/", "finetune/")))
        new_bodies = server.bodies[before:]
        assert new_bodies and all(b["temperature"] != 0.7 for b in new_bodies)  # no learn rollout was asked again
        table = json.loads((out / "report" / "table.json").read_text())
        assert table["headers"][1] == "arith Mean@3 [95% CI]"


def test_a_changed_learn_setting_reruns_the_learn_run_and_what_depends_on_it(tmp_path):
    out = tmp_path / "exp"
    with WorldServer(World()) as server:
        recipe = write_recipe(tmp_path, server.base_url, seeds=(1,))
        assert run(recipe, "--out", out).exit_code == 0
        before = len(server.bodies)
        more = run(recipe, "--out", out, "--set", "learn.settings.epochs=2")
        assert more.exit_code == 0, more.output
        actions = last_actions(out)
        assert actions == {
            "learn/seed-1": "ran",
            "eval/arith/base": "skipped",
            "eval/arith/library-seed-1": "ran",
            "report": "ran",
        }
        rollouts = [b for b in server.bodies[before:] if b["temperature"] == 0.7]
        assert len(rollouts) == 2 * 2  # more epochs: the learn run resumed and drew only epoch 2's rollouts
        assert json.loads((out / "learn" / "seed-1" / "metrics.json").read_text())["totals"]["steps"] == 4

        fresh = run(recipe, "--out", out, "--set", "learn.settings.group_size=3")
        assert fresh.exit_code == 0, fresh.output
        assert last_actions(out)["learn/seed-1"] == "ran" and last_actions(out)["eval/arith/base"] == "skipped"
        assert json.loads((out / "learn" / "seed-1" / "metrics.json").read_text())["totals"]["rollouts"] == 2 * 3


def test_kill_9_mid_experiment_then_the_same_command_finishes_without_repeating_paid_calls(tmp_path):
    (tmp_path / "ref").mkdir()
    with WorldServer(World()) as reference_server:  # an uninterrupted run, for the number of calls it needs
        reference = run(write_recipe(tmp_path / "ref", reference_server.base_url), "--out", tmp_path / "ref" / "exp")
        assert reference.exit_code == 0, reference.output
        needed = len(reference_server.bodies)

    out = tmp_path / "exp"
    with WorldServer(World(), delay_s=0.15) as server:
        recipe = write_recipe(tmp_path, server.base_url)
        command = [sys.executable, "-m", "tfgrpo", "experiment", str(recipe), "--out", str(out)]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            if (out / "experiment.json").is_file() and state(out)["steps"].get("learn/seed-1", {}).get(
                "status"
            ) == "done":
                break
            time.sleep(0.05)
        assert process.poll() is None, process.communicate()
        process.send_signal(signal.SIGKILL)  # somewhere in learn/seed-2
        process.wait(timeout=30)
        killed_at = len(server.bodies)
        assert 0 < killed_at < needed

        result = run(recipe, "--out", out)
        assert result.exit_code == 0, result.output
        assert last_actions(out)["learn/seed-1"] == "skipped"
        assert last_actions(out)["learn/seed-2"] == "ran"  # resumed from its run directory
        # at most the calls in flight at the kill (concurrency 4) are asked twice
        assert len(server.bodies) <= needed + 4
        assert (out / "report" / "report.md").is_file()
        metrics = json.loads((out / "learn" / "seed-2" / "metrics.json").read_text())
        assert metrics["status"] == "completed"


def test_the_budget_stops_the_experiment_cleanly_and_a_larger_one_continues(tmp_path):
    out = tmp_path / "exp"
    with WorldServer(World()) as server:
        recipe = write_recipe(tmp_path, server.base_url, seeds=(1,), price=1000.0)  # ~$0.1 a call
        result = run(recipe, "--out", out, "--budget-usd", "0.5")
        assert result.exit_code == 3, result.output
        assert "budget" in result.output and "Traceback" not in result.output
        record = state(out)
        assert record["runs"][-1]["status"] == "budget_exceeded"
        assert not (out / "report" / "report.md").exists()
        spent = sum(step["cost_usd"] for step in record["steps"].values())
        assert 0.5 <= spent < 0.5 + 4 * 0.2  # stopped within the calls already in flight

        finished = run(recipe, "--out", out, "--budget-usd", "100")
        assert finished.exit_code == 0, finished.output
        assert (out / "report" / "report.md").is_file()
        assert json.loads((out / "learn" / "seed-1" / "metrics.json").read_text())["status"] == "completed"


def test_the_estimate_counts_the_calls_a_run_makes(tmp_path):
    with WorldServer(World()) as server:
        recipe_path = write_recipe(tmp_path, server.base_url, seeds=(1,))
        recipe = load_recipe(str(recipe_path))
        estimates = {step.id: estimate_step(step, recipe.estimate) for step in build_plan(recipe, tmp_path / "exp")}
        assert run(recipe_path, "--out", tmp_path / "exp").exit_code == 0
        made = len(server.bodies)
    # learn: 2 problems x G=2 rollouts + 4 summaries + 2 group analyses + 2 consolidations; eval: 3 problems x K=2
    assert estimates["learn/seed-1"].calls == 12 and estimates["eval/arith/base"].calls == 6
    assert sum(e.calls for e in estimates.values()) == made
    assert estimates["report"].cost_usd == 0 and estimates["eval/arith/base"].cost_usd > 0

    with_tools = load_recipe(
        str(recipe_path),
        ["eval_defaults.agent.tools=[python]", "eval_defaults.agent.max_turns=4", "estimate.tool_turns=2"],
    )
    step = next(s for s in build_plan(with_tools, tmp_path / "exp") if s.id == "eval/arith/base")
    tools = estimate_step(step, with_tools.estimate)
    assert tools.calls == 2 * 6 and tools.ceiling_usd > 4 * estimates["eval/arith/base"].ceiling_usd * 0.99


def test_dry_run_of_paper_math_prints_the_plan_and_a_cost_estimate(tmp_path):
    result = run("paper-math", "--out", tmp_path / "pm", "--dry-run", "--set", "evals.aime24.samples=8")
    assert result.exit_code == 0, result.output
    for step in ("learn/seed-1", "learn/seed-3", "eval/aime24/base", "eval/aime25/library-seed-2", "report"):
        assert step in result.output
    assert "K=8" in result.output and "K=32" in result.output
    assert "estimate for the steps still to run: $" in result.output and "no price" not in result.output
    assert not (tmp_path / "pm").exists()  # nothing written, nothing spent


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("learn.settings.group_sise=3", "unknown key 'group_sise'"),
        ("evals.easy.samples=0", "evals.easy.samples: Input should be greater than or equal to 1"),
        ("learn.settings.out=elsewhere", "out: set by the experiment itself"),
        ("evals.easy", "expected KEY.PATH=VALUE"),
    ],
)
def test_a_bad_recipe_or_override_is_a_clear_error(tmp_path, capsys, override, message):
    with pytest.raises(SystemExit) as exit_info:
        main(["experiment", "quickstart", "--out", str(tmp_path / "q"), "--dry-run", "--set", override])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_the_quickstart_learns_on_its_own_set_and_copies_of_the_model_change_no_fingerprint(tmp_path):
    recipe = load_recipe("quickstart")
    assert (recipe.model.backend, recipe.model.llamacpp_instances) == ("llamacpp", 2)
    assert recipe.learn.data == "easy_train" and {spec.data for spec in recipe.evals.values()} == {"easy"}
    shipped = {s.id: s.fingerprint for s in build_plan(recipe, tmp_path / "q")}
    one_copy = load_recipe("quickstart", ["model.llamacpp_instances=1"])
    assert {s.id: s.fingerprint for s in build_plan(one_copy, tmp_path / "q")} == shipped  # how fast, not what


def test_fingerprints_follow_settings_files_and_inputs_but_not_endpoints(tmp_path):
    recipe_path = write_recipe(tmp_path, "http://127.0.0.1:1/v1")
    first = {s.id: s.fingerprint for s in build_plan(load_recipe(str(recipe_path)), tmp_path / "exp")}
    moved = {
        s.id: s.fingerprint
        for s in build_plan(
            load_recipe(
                str(recipe_path),
                ["model.base_url=http://127.0.0.1:2/v1", "model.api_key=other", "model.concurrency=1"],
            ),
            tmp_path / "exp",
        )
    }
    assert moved == first  # where requests go and how many at once change no result
    write_problems(tmp_path / "eval.jsonl", [(5, 6), (7, 8), (9, 2)])  # an edited eval file
    edited = {s.id: s.fingerprint for s in build_plan(load_recipe(str(recipe_path)), tmp_path / "exp")}
    assert {k for k in first if first[k] != edited[k]} == {
        "eval/arith/base",
        "eval/arith/library-seed-1",
        "eval/arith/library-seed-2",
        "report",
    }
    seed = {
        s.id: s.fingerprint
        for s in build_plan(load_recipe(str(recipe_path), ["learn.settings.max_ops_per_group=1"]), tmp_path / "exp")
    }
    assert {k for k in edited if edited[k] != seed[k]} == {
        "learn/seed-1",
        "learn/seed-2",
        "eval/arith/library-seed-1",
        "eval/arith/library-seed-2",
        "report",
    }


@pytest.mark.parametrize("name", BUNDLED_RECIPES)
def test_bundled_recipes_plan(name, tmp_path):
    recipe = load_recipe(name)
    plan = build_plan(recipe, tmp_path)
    assert plan[-1].id == "report" and len({s.fingerprint for s in plan}) == len(plan)
    if recipe.finetunes:
        from tfgrpo.finetune.models import device_training_defaults
        from tfgrpo.finetune.run import build_method_config

        evals = {f"eval/{set_name}/{name}" for set_name in recipe.evals for name in ("sft", "grpo")}
        assert {s.id for s in plan} >= {"finetune/sft", "finetune/grpo", *evals}
        for spec in recipe.finetunes.values():  # the options are valid TRL configs, as `tfgrpo finetune` builds them
            build_method_config(
                spec.method, {**device_training_defaults(), "output_dir": str(tmp_path), **spec.options}
            )


def test_quickstart_baselines_evaluates_all_four_rows_on_one_engine_and_trains_on_the_learn_run(tmp_path):
    recipe = load_recipe("quickstart-baselines")
    plan = {step.id: step for step in build_plan(recipe, tmp_path / "qb")}
    assert plan["learn/seed-42"].config.llm.backend == "llamacpp"  # learning: the fast local path
    llms = {name: plan[f"eval/easy/{name}"].config.llm for name in ("base", "library-seed-42", "sft", "grpo")}
    assert {llm.backend for llm in llms.values()} == {"transformers"}  # every row decoded by the same engine
    assert llms["base"].adapter is None and llms["sft"].adapter == str(tmp_path / "qb" / "finetune" / "sft")
    settings = {
        (plan[f"eval/easy/{name}"].config.sampling.model_dump_json(), plan[f"eval/easy/{name}"].config.samples)
        for name in llms
    }
    assert (
        len(settings) == 1 and plan["eval/easy/base"].config.sampling.seed == 0
    )  # same K, sampling, seed for all four
    for name in ("sft", "grpo"):  # both baselines on the learn run's problems (SFT: its successful rollouts)
        assert plan[f"finetune/{name}"].deps == ["learn/seed-42"]
    overridden = load_recipe("quickstart-baselines", ["finetunes.grpo.options.max_steps=5"])
    changed = {s.id for s in build_plan(overridden, tmp_path / "qb") if s.fingerprint != plan[s.id].fingerprint}
    assert changed == {"finetune/grpo", "eval/easy/grpo", "report"}  # --set reaches a baseline's settings


def test_the_time_estimate_follows_the_timed_speeds(tmp_path):
    from tfgrpo.experiment.timing import Speed, speed_key, step_llms, step_seconds

    batched = Speed("transformers", load_s=1.0, prompt_tps=100.0, step_s=0.1, row_s=0.01, batch=32)
    # 40 replies of 10 tokens: a batch of 32 (10 steps of 0.1 + 31 x 0.01) then one of 8 (10 steps of 0.1 + 7 x 0.01)
    assert batched.decode_s(40, 10) == pytest.approx(10 * 0.41 + 10 * 0.17)
    copies = Speed("llamacpp x2", load_s=0.5, prompt_tps=100.0, step_s=0.05, streams=2.0)
    assert copies.decode_s(4, 10) == pytest.approx(4 * 10 * 0.05 / 2) and copies.prefill_s(400) == 2.0

    recipe = load_recipe("quickstart-baselines")
    plan = build_plan(recipe, tmp_path / "qb")
    speeds = {speed_key(step_llms(recipe, step)): copies for step in plan if step.kind == "learn"}
    speeds.update({speed_key(step_llms(recipe, step)): batched for step in plan if step.kind in ("eval", "finetune")})
    assert len(speeds) == 2  # one llama.cpp, one transformers: timed once each
    seconds = {step.id: step_seconds(recipe, step, speeds) for step in plan}
    # an eval: load, 32 prompts, then 32 replies of 96 tokens in one batch
    calls = estimate_step(next(s for s in plan if s.id == "eval/easy/base"), recipe.estimate)
    assert seconds["eval/easy/base"] == pytest.approx(
        1.0 + calls.prompt_tokens / 100.0 + 96 * (0.1 + 31 * 0.01), rel=1e-3
    )
    assert seconds["finetune/grpo"] > seconds["finetune/sft"] > 1.0  # GRPO also generates its groups
    assert all(value is not None and value > 0 for value in seconds.values())
    twice_as_slow = {key: Speed(**{**vars(speed), "step_s": 2 * speed.step_s}) for key, speed in speeds.items()}
    assert step_seconds(recipe, plan[0], twice_as_slow) > seconds[plan[0].id]
    assert step_seconds(load_recipe("paper-math"), build_plan(load_recipe("paper-math"), tmp_path)[0], {}) is None


def test_a_failed_baseline_keeps_the_other_rows_marks_its_own_and_is_tried_again(tmp_path):
    from tests.helpers.tiny_models import tiny_model_dir

    tiny = str(tiny_model_dir(tmp_path / "tiny", "qwen2"))
    options = {"peft": "lora", "max_steps": 1, "per_device_train_batch_size": 2}
    finetunes = {
        "sft": {"method": "sft", "model": tiny, "data": "learn", "options": options},
        # no rollout reaches reward 2: no SFT data, a `tfgrpo finetune` error before any model loads
        "broken": {"method": "sft", "model": tiny, "data": "learn", "options": {**options, "success_threshold": 2}},
    }
    out = tmp_path / "exp"
    with WorldServer(World()) as server:
        recipe = write_recipe(tmp_path, server.base_url, seeds=(1,), finetunes=finetunes)
        result = run(recipe, "--out", out, "--set", "estimate.calibrate=false")
        assert result.exit_code == 0, result.output
        assert "finetune/broken failed" in result.output and "no usable sft examples" in result.output
        actions = last_actions(out)
        assert actions["finetune/broken"] == actions["eval/arith/broken"] == "failed"
        assert actions["finetune/sft"] == actions["eval/arith/sft"] == actions["report"] == "ran"
        table = json.loads((out / "report" / "table.json").read_text())
        assert [row[0] for row in table["rows"]] == ["base", "library seed 1", "broken (sft)", "sft"]
        broken = table["rows"][2]
        assert broken[1].startswith("failed: learn/seed-1/rollouts.jsonl: no usable sft examples")  # path relative
        assert broken[2:] == ["–", "–", "–", "–", "–"]
        assert all(row[1][0].isdigit() for index, row in enumerate(table["rows"]) if index != 2)
        assert "failed: " in (out / "report" / "report.md").read_text()
        assert state(out)["steps"]["finetune/broken"]["status"] == "failed"

        again = run(recipe, "--out", out, "--set", "estimate.calibrate=false")
        assert again.exit_code == 0, again.output
        actions = last_actions(out)
        assert actions["finetune/broken"] == "failed" and actions["report"] == "ran"  # tried again, redrawn
        assert {actions[k] for k in actions if "broken" not in k and k != "report"} == {"skipped"}

        fixed = run(
            recipe,
            "--out",
            out,
            "--set",
            "estimate.calibrate=false",
            "--set",
            "finetunes.broken.options.success_threshold=1",
        )
        assert fixed.exit_code == 0, fixed.output
        rows = json.loads((out / "report" / "table.json").read_text())["rows"]
        assert rows[2][1][0].isdigit() and last_actions(out)["finetune/broken"] == "ran"
