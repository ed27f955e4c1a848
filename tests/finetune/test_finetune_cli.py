"""`tfgrpo finetune`: end to end on a tiny model (adapter + summary + metrics), errors, and one real SmolLM2 run."""

from __future__ import annotations

import json

import pytest
import torch

from tests.helpers.finetune_rows import rollout
from tests.helpers.tiny_models import tiny_model_dir
from tfgrpo.cli.app import main

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("tiny"), "qwen2")


@pytest.fixture()
def run_dir(tmp_path):
    run = tmp_path / "learn-run"
    run.mkdir()
    rows = [rollout(q, s, float((s + i) % 2 == 0)) for i, q in enumerate("abcd") for s in range(4)]
    (run / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def run_cli(*args):
    try:
        main(list(args))
    except SystemExit as exc:
        return exc.code
    return 0


@pytest.mark.parametrize(("method", "peft"), [("sft", "lora"), ("cdpo", "rslora"), ("kto", "dora"), ("grpo", "lora")])
def test_finetune_cli_saves_a_standard_adapter_and_summary(tiny_dir, run_dir, tmp_path, method, peft):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    out = tmp_path / "out"
    # The math reward of a random tiny model is 0 for every sample: nothing to learn, accepted explicitly here.
    extra = (
        ["--set", "max_completion_length=8", "--group-size", "2", "--set", "allow_no_learning=true"]
        if method == "grpo"
        else []
    )
    code = run_cli(
        "finetune",
        method,
        "--model",
        str(tiny_dir),
        "--data",
        str(run_dir),
        "--out",
        str(out),
        "--max-steps",
        "2",
        "--peft",
        peft,
        "--batch-size",
        "4",
        *extra,
    )
    assert code == 0
    summary = json.loads((out / "finetune_summary.json").read_text())
    assert summary["method"] == method and summary["steps"] == 2 and summary["samples"] > 0
    assert summary["base_model"] == str(tiny_dir) and summary["adapter"] is True and summary["wall_time_s"] > 0
    assert (out / "adapter_model.safetensors").is_file()
    assert len((out / "metrics.jsonl").read_text().splitlines()) >= 2
    adapter_config = json.loads((out / "adapter_config.json").read_text())
    assert adapter_config["base_model_name_or_path"] == str(tiny_dir)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_dir), str(out))
    assert model(input_ids=torch.tensor([[1, 2, 3]])).logits.shape[-1] > 0


def test_finetune_cli_errors_are_one_line(tiny_dir, run_dir, tmp_path, capsys):
    assert run_cli("finetune", "sft", "--data", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "o")) == 2
    assert "data file not found" in capsys.readouterr().err
    assert (
        run_cli(
            "finetune",
            "sft",
            "--model",
            str(tiny_dir),
            "--data",
            str(run_dir),
            "--out",
            str(tmp_path / "o"),
            "--set",
            "bogus=1",
        )
        == 2
    )
    assert "unknown option(s) bogus" in capsys.readouterr().err
    assert (
        run_cli(
            "finetune",
            "cdpo",
            "--model",
            str(tiny_dir),
            "--data",
            str(run_dir),
            "--out",
            str(tmp_path / "o"),
            "--set",
            "label_smoothing=0.7",
        )
        == 2
    )
    assert "label_smoothing < 0.5" in capsys.readouterr().err
    assert run_cli("finetune", "sftx", "--data", str(run_dir), "--out", str(tmp_path / "o")) == 2
    assert "unknown method" in capsys.readouterr().err


def test_config_file_supplies_options(tiny_dir, run_dir, tmp_path):
    config = tmp_path / "ft.yaml"
    config.write_text(
        f"model: {tiny_dir}\ndata: {run_dir}\nout: {tmp_path / 'o'}\nmax_steps: 1\npeft: pissa\n"
        "lora_r: 4\nper_device_train_batch_size: 2\nsuccess_threshold: 1.0\n"
    )
    assert run_cli("finetune", "sft", "--config", str(config)) == 0
    adapter_config = json.loads((tmp_path / "o" / "adapter_config.json").read_text())
    assert adapter_config["r"] == 8  # PiSSA r=4, saved as the equivalent plain LoRA delta of rank 2r
    assert json.loads((tmp_path / "o" / "finetune_summary.json").read_text())["steps"] == 1


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_lora_sft_on_embedded_smollm2(run_dir, tmp_path):
    """The real pretrained model: LoRA SFT on correct rollouts, a few steps; loss is finite and the adapter loads."""
    out = tmp_path / "smol"
    code = run_cli(
        "finetune",
        "sft",
        "--data",
        str(run_dir),
        "--out",
        str(out),
        "--max-steps",
        "3",
        "--peft",
        "lora",
        "--batch-size",
        "2",
        "--lr",
        "1e-4",
    )
    assert code == 0
    summary = json.loads((out / "finetune_summary.json").read_text())
    assert summary["steps"] == 3 and summary["adapter"]
    assert "smollm2" in summary["base_model"].lower()
    losses = [
        json.loads(line)["loss"]
        for line in (out / "metrics.jsonl").read_text().splitlines()
        if "loss" in json.loads(line)
    ]
    assert len(losses) == 3 and all(0 < loss < 20 for loss in losses)  # a pretrained model starts low


def test_missing_finetune_extra_is_one_line_before_anything_runs(run_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "trl", None)  # `import trl` now fails as if not installed
    code = run_cli("finetune", "sft", "--data", str(run_dir), "--out", str(tmp_path / "o"))
    err = capsys.readouterr().err
    assert code == 2
    assert [line for line in err.splitlines() if line.strip()] == [
        "error: install the finetune extra: pip install 'tfgrpo[finetune]' (no trl)"
    ]
    assert not (tmp_path / "o").exists()


def test_header_is_printed_only_for_a_valid_method(run_dir, tmp_path, capsys):
    assert run_cli("finetune", "sftx", "--data", str(run_dir), "--out", str(tmp_path / "o")) == 2
    err = capsys.readouterr().err
    assert "unknown method 'sftx'" in err and "finetune sftx" not in err


def test_bundled_dataset_name_feeds_rl_methods_only(tiny_dir, tmp_path, capsys):
    assert (
        run_cli(
            "finetune", "sft", "--model", str(tiny_dir), "--data", "math_l5_train200", "--out", str(tmp_path / "o")
        )
        == 2
    )
    assert "holds problems without completions" in capsys.readouterr().err
    out = tmp_path / "grpo"
    assert (
        run_cli(
            "finetune",
            "grpo",
            "--model",
            str(tiny_dir),
            "--data",
            "math_l5_train200",
            "--out",
            str(out),
            "--max-steps",
            "1",
            "--batch-size",
            "2",
            "--group-size",
            "2",
            "--set",
            "max_completion_length=4",
            "--set",
            "allow_no_learning=true",
        )
        == 0
    )
    assert json.loads((out / "finetune_summary.json").read_text())["samples"] == 200


def _reward_model(path, sign):
    """A tiny sequence classifier (num_labels=1) scoring sign * w·h: two of them give opposite rewards."""
    from transformers import AutoModelForSequenceClassification

    from tests.helpers.tiny_models import build_tiny_tokenizer, tiny_config

    tokenizer = build_tiny_tokenizer(save_dir=path)
    config = tiny_config(tokenizer, "qwen2")
    config.num_labels = 1
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_config(config)
    with torch.no_grad():
        model.score.weight.normal_(0.0, 3.0).mul_(sign)  # same draw, then mirrored
    model.save_pretrained(str(path))
    return path


def test_ppo_with_an_external_reward_model(tiny_dir, tmp_path):
    """`--reward DIR`: TRL scores completions with the reward model; mirroring its head mirrors the reward."""
    first_step = {}
    for name, sign in (("rm_plus", 1.0), ("rm_minus", -1.0)):
        reward_dir = _reward_model(tmp_path / name, sign)
        out = tmp_path / f"ppo-{name}"
        assert (
            run_cli(
                "finetune",
                "ppo",
                "--model",
                str(tiny_dir),
                "--data",
                "easy",
                "--out",
                str(out),
                "--reward",
                str(reward_dir),
                "--max-steps",
                "2",
                "--batch-size",
                "4",
                "--set",
                "max_completion_length=6",
            )
            == 0
        )
        logs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        steps = [entry for entry in logs if f"rewards/{name}/mean" in entry]
        assert len(steps) == 2
        assert all(entry["ppo/score"] == pytest.approx(entry[f"rewards/{name}/mean"], abs=1e-5) for entry in steps)
        first_step[name] = steps[0][f"rewards/{name}/mean"]
    # same seed, same first completions: the reward comes from the model, sign and all
    assert abs(first_step["rm_plus"]) > 1e-3
    assert first_step["rm_minus"] == pytest.approx(-first_step["rm_plus"], rel=1e-4)
