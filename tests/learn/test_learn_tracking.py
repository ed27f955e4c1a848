"""`--report-to` on learn and eval, against the real trackers offline: TensorBoard event files read back with
its EventAccumulator, MLflow's SQLite store with MlflowClient, W&B's offline run file, trackio's database;
a planted API key appears in none of them. A tracker that is not installed or not known: one line, nothing spent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.helpers.cli import run_cli
from tests.helpers.learn_world import World, WorldServer, write_problems
from tests.helpers.tracker_files import (
    tensorboard_scalars,
    tensorboard_texts,
    trackio_rows,
    wandb_config,
    wandb_history,
)
from tfgrpo.cli.app import app

PLANTED_KEY = "sk-planted-4c1f9e0b7d2a"
REPO = Path(__file__).resolve().parents[2]


def tracker_env(tmp_path: Path) -> dict[str, str]:
    return {
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "TRACKIO_DIR": str(tmp_path / "trackio"),
        "HOME": str(tmp_path),  # W&B and trackio settings files, if any, land here
    }


def files_under(*roots: Path) -> list[Path]:
    return [
        p for root in roots if root.exists() for p in ([root] if root.is_file() else root.rglob("*")) if p.is_file()
    ]


@pytest.mark.timeout(240)
def test_learn_logs_every_step_to_all_four_trackers_and_no_secret(tmp_path):
    data = write_problems(tmp_path / "train.jsonl", [(1, 2), (3, 4), (5, 6)])
    val = write_problems(tmp_path / "val.jsonl", [(2, 2), (7, 1)])
    out = tmp_path / "run"
    options = ("-G", "2", "--epochs", "1", "--batch-size", "1", "--max-tokens", "64", "--val-data", str(val))
    options += ("--val-samples", "1", "--gate", "--report-to", "tensorboard,mlflow", "--report-to", "wandb,trackio")
    with WorldServer(World()) as server:
        command = [sys.executable, "-m", "tfgrpo", *server.learn_args(data, out, *options, api_key=PLANTED_KEY)]
        env = {**os.environ, **tracker_env(tmp_path), "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
        done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=220)
    assert done.returncode == 0, done.stderr[-3000:]

    scalars = tensorboard_scalars(out / "tensorboard")
    for tag in ("train/accuracy", "groups/kept", "groups/skipped", "ops/proposed", "ops/applied", "ops/rejected"):
        assert [step for step, _ in scalars[tag]] == [1, 2, 3], tag
    metrics = json.loads((out / "metrics.json").read_text())
    steps = metrics["steps"]  # each step's final metrics, as the run wrote them
    expected = {
        "train/accuracy": [s["accuracy"] for s in steps],
        "library/size": [s["library_size"] for s in steps],
        "ops/applied": [s["ops_applied"] for s in steps],
        "ops/rejected": [s["ops_rejected"] for s in steps],
        "groups/kept": [s["groups_kept"] for s in steps],
        "validation/gate_kept": [float(s["gate"]["decision"] == "kept") for s in steps],
        "tokens/completion": [s["completion_tokens"] for s in steps],
    }
    for tag, values in expected.items():
        assert [value for _, value in scalars[tag]] == pytest.approx(values), tag
    for tag in ("credit/untested", "validation/mean_at_k", "validation/gate_kept", "tokens/prompt", "cost/usd"):
        assert len(scalars[tag]) == 3, tag
    assert all(value > 0 for _, value in scalars["tokens/prompt"]) and all(v > 0 for _, v in scalars["time/wall_s"])
    assert scalars["validation/epoch_mean_at_k"] == [(3, pytest.approx(metrics["validation"][0]["mean_at_k"]))]
    assert scalars["totals/ops_applied"] == [(3, metrics["totals"]["ops_applied"])]
    texts = tensorboard_texts(out / "tensorboard")
    assert texts["run"] == "tfgrpo learn: run" and '"model": "world-model"' in texts["config"]
    assert "When adding" in texts["credit"]  # the credit table: one row per final experience

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracker_env(tmp_path)["MLFLOW_TRACKING_URI"])
    (run,) = client.search_runs([client.get_experiment_by_name("tfgrpo").experiment_id])
    assert run.info.run_name == "run" and run.info.status == "FINISHED"
    assert run.data.params["llm.model"] == "world-model" and run.data.params["group_size"] == "2"
    library_sizes = [m.value for m in client.get_metric_history(run.info.run_id, "library/size")]
    assert library_sizes == expected["library/size"]

    (wandb_file,) = (out / "wandb").glob("offline-run-*/run-*.wandb")
    history = wandb_history(wandb_file)
    assert [row["ops/applied"] for row in history if "ops/applied" in row] == expected["ops/applied"]
    assert wandb_config(wandb_file)["llm"]["model"] == "world-model"

    rows, configs = trackio_rows(tmp_path / "trackio" / "tfgrpo.db")
    assert [row["step"] for row in rows if "train/accuracy" in row] == [1, 2, 3]
    assert configs["run"]["llm"]["model"] == "world-model"

    tracker_files = files_under(out / "tensorboard", out / "wandb", tmp_path / "mlflow.db", tmp_path / "mlruns")
    tracker_files += files_under(tmp_path / "trackio")
    assert len(tracker_files) >= 5
    leaked = [p for p in tracker_files if PLANTED_KEY.encode() in p.read_bytes()]
    assert leaked == [], leaked


@pytest.mark.timeout(120)
def test_eval_logs_its_metrics_and_samples_to_tensorboard_and_mlflow(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.chdir(tmp_path)  # MLflow's artifacts (the samples table) go to ./mlruns
    data = write_problems(tmp_path / "test.jsonl", [(1, 2), (3, 4)])
    out = tmp_path / "eval"
    with WorldServer(World()) as server:
        args = ["eval", "--data", str(data), "--out", str(out), "-k", "2", "--backend", "openai", "--model", "m"]
        args += ["--base-url", server.base_url, "--api-key", PLANTED_KEY, "--report-to", "tensorboard,mlflow"]
        args += ["--run-name", "base-eval", "--tracker-project", "evals"]
        result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output

    scalars = tensorboard_scalars(out / "tensorboard")
    assert scalars["mean_at_k"] == [(0, 0.5)]  # even samples right, odd wrong
    assert scalars["usage/total/prompt_tokens"][0][1] > 0
    texts = tensorboard_texts(out / "tensorboard")
    assert texts["samples"].count("\n| q") == 4 and "Adding gives" in texts["samples"]

    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    (run,) = client.search_runs([client.get_experiment_by_name("evals").experiment_id])
    assert run.info.run_name == "base-eval" and run.data.metrics["mean_at_k"] == 0.5
    assert run.data.params["llm.api_key"] == "**********"
    table = client.load_table(client.get_experiment_by_name("evals").experiment_id, "samples.json")
    assert sorted(table["problem_id"]) == ["q1_2", "q1_2", "q3_4", "q3_4"]
    leaked = [p for p in files_under(out / "tensorboard", tmp_path / "mlflow.db", tmp_path / "mlruns")]
    assert leaked and not [p for p in leaked if PLANTED_KEY.encode() in p.read_bytes()]


def test_a_tracker_not_installed_is_one_line_before_any_request(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "wandb", None)  # how Python marks a module as not importable
    data = write_problems(tmp_path / "train.jsonl", [(1, 2)])
    with WorldServer(World()) as server:
        code = run_cli(*server.learn_args(data, tmp_path / "run", "--report-to", "wandb"))
        assert server.bodies == []
    error = capsys.readouterr().err
    assert code != 0 and "--report-to wandb: wandb is not installed: pip install 'tfgrpo[wandb]'" in error
    assert "Traceback" not in error and len(error.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


@pytest.mark.parametrize("given", ["comet", "none,mlflow"])
def test_a_report_to_that_is_no_tracker_is_one_line(tmp_path, capsys, given):
    code = run_cli("learn", "--data", "easy", "--out", tmp_path / "r", "--report-to", given)
    error = capsys.readouterr().err
    assert code != 0 and "report_to" in error and "Traceback" not in error and len(error.strip().splitlines()) == 1


def test_report_to_from_yaml_and_the_command_line(tmp_path):
    from tfgrpo.core.config import build_config
    from tfgrpo.learn.config import LearnConfig

    path = tmp_path / "learn.yaml"
    path.write_text("data: easy\nreport_to: [tensorboard, mlflow]\nrun_name: first\n", encoding="utf-8")
    assert build_config(LearnConfig, path, {}).trackers == ["tensorboard", "mlflow"]
    given = build_config(LearnConfig, path, {"report_to": ["wandb,trackio"], "run_name": None})
    assert given.trackers == ["wandb", "trackio"] and given.run_name == "first"
    assert build_config(LearnConfig, None, {"data": "easy"}).trackers == []  # the default: none
