"""`tfgrpo finetune --report-to`: the choice reaches TRL, whose callbacks write TensorBoard event files and an
MLflow run that read back with the step losses; a name that is no tracker is one line before TRL loads."""

from __future__ import annotations

import json

import pytest

from tests.helpers.finetune_rows import rollout
from tests.helpers.tiny_models import tiny_model_dir
from tests.helpers.tracker_files import tensorboard_scalars
from tfgrpo.cli.app import main

pytestmark = pytest.mark.timeout(180)


def run_cli(*args: str) -> int:
    try:
        main(list(args))
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def test_finetune_logs_its_losses_to_tensorboard_and_mlflow_through_trl(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "finetunes")
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "learn-run"
    run.mkdir()
    rows = [rollout(q, s, float((s + i) % 2 == 0)) for i, q in enumerate("abcd") for s in range(4)]
    (run / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "sft-out"
    tiny = tiny_model_dir(tmp_path / "tiny", "qwen2")
    code = run_cli(
        *("finetune", "sft", "--model", str(tiny), "--data", str(run), "--out", str(out), "--max-steps", "3"),
        *("--peft", "lora", "--batch-size", "4", "--report-to", "tensorboard,mlflow"),
    )
    assert code == 0
    (logdir,) = {path.parent for path in (out / "runs").rglob("events.out.tfevents.*")}
    losses = tensorboard_scalars(logdir)["train/loss"]
    assert [step for step, _ in losses] == [1, 2, 3] and all(value > 0 for _, value in losses)

    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    (mlflow_run,) = client.search_runs([client.get_experiment_by_name("finetunes").experiment_id])
    assert mlflow_run.info.run_name == "sft-out"  # the run's name: the output folder's
    history = client.get_metric_history(mlflow_run.info.run_id, "loss")
    assert [m.step for m in history] == [1, 2, 3]
    assert [m.value for m in history] == pytest.approx([value for _, value in losses], rel=1e-5)


def test_finetune_refuses_a_report_to_that_is_no_tracker_in_one_line(tmp_path, capsys):
    code = run_cli("finetune", "sft", "--data", "x.jsonl", "--out", str(tmp_path / "o"), "--report-to", "comet_ml")
    error = capsys.readouterr().err
    assert code == 2 and "--report-to" in error and "comet_ml" in error and len(error.strip().splitlines()) == 1
