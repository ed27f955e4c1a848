"""Seeds: `learn --seeds N` makes a seed set; eval and compare take it and report the gain across seeds
(mean, spread, and a CI with seeds and problems as the two sources of variance)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from tests.helpers.learn_world import World, write_problems
from tfgrpo.core.metrics import summarize
from tfgrpo.eval.compare import compare_runs
from tfgrpo.eval.runner import EvalConfig, evaluate
from tfgrpo.eval.seed_eval import evaluate_seed_set
from tfgrpo.eval.seeds import SEED_SET_FILE, two_way_bootstrap_ci, write_seed_set
from tfgrpo.experiment.learn_seeds import learn_seeds
from tfgrpo.learn.config import LearnConfig
from tfgrpo.llm.backends.scripted import ScriptedBackend
from tfgrpo.llm.factory import build_client

pytestmark = pytest.mark.timeout(180)


def scripted(responder):
    return lambda config: build_client(
        config.llm, backends=[ScriptedBackend(responder)], cache_path=Path(config.out) / "cache.sqlite"
    )


def test_learn_seeds_then_eval_and_compare_the_set(tmp_path):
    data = write_problems(tmp_path / "train.jsonl", [(17, 25), (30, 41), (12, 13)])
    config = LearnConfig(
        data=str(data),
        out=str(tmp_path / "learn"),
        dedup=False,
        llm={"max_retries": 0},
        group_size=2,
        epochs=1,
        batch_size=1,
        seed=7,
        seeds=3,
    )
    results = learn_seeds(config, 3, client_for=scripted(World().respond), console=Console(file=io.StringIO()))
    assert [r.status for r in results] == ["completed"] * 3
    manifest = json.loads((tmp_path / "learn" / SEED_SET_FILE).read_text())
    assert manifest["kind"] == "learn" and manifest["seeds"] == [7, 8, 9]
    orders = []
    for seed in (7, 8, 9):
        run = tmp_path / "learn" / f"seed-{seed}"
        assert (run / "library.json").is_file()
        orders.append(
            [json.loads(line)["query_id"] for line in (run / "rollouts.jsonl").read_text().splitlines()][::2]
        )
    assert len({tuple(o) for o in orders}) > 1  # the seed changes the order of the steps

    evals = write_problems(tmp_path / "eval.jsonl", [(2, 3), (4, 5), (6, 7), (8, 9)])

    def answer(request, index):  # right on even samples only: 50% for every system
        text = request.messages[-1].content
        a, b = (int(x) for x in text.split("What is ")[1].split("?")[0].split("+"))
        return f"\\boxed{{{a + b if index % 2 == 0 else 0}}}"

    base = EvalConfig(data=str(evals), out=str(tmp_path / "base"), samples=2)
    evaluate(base, client=scripted(answer)(base), console=Console(file=io.StringIO()))
    set_config = EvalConfig(data=str(evals), out=str(tmp_path / "lib"), samples=2, library=str(tmp_path / "learn"))
    members = evaluate_seed_set(set_config, client_for=scripted(answer), console=Console(file=io.StringIO()))
    assert [m.metrics["label"] for m in members] == ["learn/seed-7", "learn/seed-8", "learn/seed-9"]
    comparison, files = compare_runs([tmp_path / "base", tmp_path / "lib"], tmp_path / "report")
    (row,) = comparison.seed_sets
    assert row["system"] == "lib" and row["seeds"] == 3 and row["sd"] == 0.0 and row["gain"] == 0.0
    assert "Across seeds" in files["markdown"].read_text()


def write_eval_run(run_dir: Path, accuracies: list[float], k: int = 8) -> None:
    rows = [
        {
            "problem_id": f"p{i:02d}",
            "sample": s,
            "reward": 1.0 if s < round(a * k) else 0.0,
            "extracted": "1",
            "gold": "1",
            "error": None,
        }
        for i, a in enumerate(accuracies)
        for s in range(k)
    ]
    run_dir.mkdir(parents=True)
    (run_dir / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run_dir / "metrics.json").write_text(json.dumps({**summarize(rows, n_bootstrap=200), "provenance": {}}))


def test_compare_reports_spread_across_seeds(tmp_path):
    problems = 20
    write_eval_run(tmp_path / "base", [0.25] * problems)
    gains = {1: 0.5, 2: 0.25, 3: 0.0}  # one lucky seed, one useless one
    for seed, gain in gains.items():
        write_eval_run(tmp_path / "lib" / f"seed-{seed}", [0.25 + gain] * problems)
    write_seed_set(tmp_path / "lib", "eval", list(gains))
    comparison, files = compare_runs([tmp_path / "base", tmp_path / "lib"], tmp_path / "report")
    (row,) = comparison.seed_sets
    assert row["per_seed"] == pytest.approx([0.75, 0.5, 0.25])
    assert row["mean"] == pytest.approx(0.5) and row["sd"] == pytest.approx(0.25)
    assert row["gain"] == pytest.approx(0.25)
    low, high = row["gain_ci95"]
    assert low < 0.25 < high and high - low > 0.2  # the seeds' spread widens the CI
    # per problem every seed is flat, so a problems-only bootstrap would see no spread at all
    assert {s.name for s in comparison.systems} == {"base", "lib/seed-1", "lib/seed-2", "lib/seed-3"}
    assert "25.0 pp" in files["markdown"].read_text()


def test_two_way_bootstrap_counts_both_sources():
    rng = np.random.default_rng(0)
    problem_noise = rng.normal(0.1, 0.2, size=30)
    same_seeds = np.tile(problem_noise, (3, 1))
    spread_seeds = same_seeds + np.array([[0.3], [0.0], [-0.3]])
    narrow = two_way_bootstrap_ci(same_seeds, n_bootstrap=2000)
    wide = two_way_bootstrap_ci(spread_seeds, n_bootstrap=2000)
    assert narrow[1] - narrow[0] > 0.05  # problems alone already give width
    assert wide[1] - wide[0] > 1.5 * (narrow[1] - narrow[0])


@pytest.mark.timeout(240)
def test_the_seed_workflow_from_the_command_line(tmp_path):
    from typer.testing import CliRunner

    from tests.helpers.learn_world import WorldServer
    from tfgrpo.cli.app import app

    train = write_problems(tmp_path / "train.jsonl", [(17, 25), (30, 41)])
    val = write_problems(tmp_path / "val.jsonl", [(1, 2), (3, 4), (5, 6)])
    evals = write_problems(tmp_path / "eval.jsonl", [(2, 3), (4, 5), (6, 7)])
    runner = CliRunner()
    with WorldServer(World()) as server:
        backend = [
            "--backend",
            "openai",
            "--model",
            "world",
            "--base-url",
            server.base_url,
            "--api-key",
            "k",
            "--max-tokens",
            "64",
        ]
        learned = runner.invoke(
            app,
            [
                "learn",
                "--data",
                str(train),
                "--val-data",
                str(val),
                "--out",
                str(tmp_path / "learn"),
                "--seeds",
                "2",
                "--gate",
                "--select-by",
                "step",
                "-G",
                "2",
                "--epochs",
                "1",
                "--batch-size",
                "1",
                "--val-samples",
                "2",
                *backend,
            ],
        )
        assert learned.exit_code == 0, learned.output
        assert "seed set:" in learned.output and "tfgrpo eval --library" in learned.output
        for seed in (42, 43):
            metrics = json.loads((tmp_path / "learn" / f"seed-{seed}" / "metrics.json").read_text())
            assert metrics["gate"]["kept"] + metrics["gate"]["rejected"] == 2 and metrics["best_step"] is not None
        base = runner.invoke(
            app, ["eval", "--data", str(evals), "--out", str(tmp_path / "base"), "--samples", "2", *backend]
        )
        assert base.exit_code == 0, base.output
        lib = runner.invoke(
            app,
            [
                "eval",
                "--data",
                str(evals),
                "--out",
                str(tmp_path / "lib"),
                "--samples",
                "2",
                "--library",
                str(tmp_path / "learn"),
                *backend,
            ],
        )
        assert lib.exit_code == 0, lib.output
    report = runner.invoke(
        app, ["compare", str(tmp_path / "base"), str(tmp_path / "lib"), "--out", str(tmp_path / "report")]
    )
    assert report.exit_code == 0, report.output
    assert "Across seeds" in report.output and "lib/seed-43" in report.output
