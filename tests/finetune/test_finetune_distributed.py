"""`tfgrpo finetune` scaled out: 2 processes on CPU (DDP over gloo) under `accelerate launch`, and the
example DeepSpeed / FSDP accelerate configs read by accelerate's own config loader."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers.finetune_rows import rollout
from tests.helpers.tiny_models import tiny_model_dir

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "finetune" / "configs"


@pytest.mark.timeout(300)
def test_two_process_ddp_on_cpu_trains_on_both_ranks_and_saves_a_loadable_adapter(tmp_path):
    pytest.importorskip("accelerate", reason="needs the finetune extra (CI installs it)")
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model_dir = tiny_model_dir(tmp_path / "tiny", "qwen2")
    run = tmp_path / "learn-run"
    run.mkdir()
    rows = [rollout(q, s, float((s + i) % 2 == 0)) for i, q in enumerate("abcd") for s in range(4)]
    (run / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    # On a machine without GPUs `--multi_gpu` starts torch's elastic launcher with N CPU processes; each
    # trains with use_cpu, so accelerate picks MULTI_CPU over gloo. Port 0: a free one, never a fixed port.
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        "0",
        "-m",
        "tfgrpo",
        "finetune",
        "sft",
        "--model",
        str(model_dir),
        "--data",
        str(run),
        "--out",
        str(out),
        "--max-steps",
        "2",
        "--peft",
        "lora",
        "--batch-size",
        "2",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    finished = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=280)
    assert finished.returncode == 0, finished.stderr[-3000:]

    summary = json.loads((out / "finetune_summary.json").read_text())
    assert summary["world_size"] == 2 and summary["distributed_type"] == "MULTI_CPU"
    assert summary["ranks_finished"] == [0, 1]  # gathered from every rank after training: both ran to the end
    assert summary["steps"] == 2 and summary["adapter"] is True
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model_dir), str(out))
    assert model(input_ids=torch.tensor([[1, 2, 3]])).logits.shape[-1] > 0


@pytest.mark.parametrize("name", ["accelerate_zero2.yaml", "accelerate_zero3.yaml", "accelerate_fsdp.yaml"])
def test_example_accelerate_configs_load_with_accelerates_own_loader(name):
    pytest.importorskip("accelerate", reason="needs the finetune extra (CI installs it)")
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.utils import DistributedType

    config = load_config_from_file(str(CONFIGS / name))
    assert config.num_processes >= 2 and config.num_machines == 1
    if "zero" in name:
        assert config.distributed_type == DistributedType.DEEPSPEED
        assert config.deepspeed_config["zero_stage"] == int(name[len("accelerate_zero")])
    else:
        assert config.distributed_type == DistributedType.FSDP
        assert config.fsdp_config["fsdp_version"] == 2


def test_fsdp_on_cpu_is_refused_in_one_line(tmp_path, monkeypatch):
    pytest.importorskip("accelerate", reason="needs the finetune extra (CI installs it)")
    from tfgrpo.finetune.errors import FinetuneError
    from tfgrpo.finetune.run import run_finetune

    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")  # what `accelerate launch --use_fsdp` sets
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(FinetuneError, match="FSDP needs GPUs"):
        run_finetune("sft", data=tmp_path / "none.jsonl", out=tmp_path / "out")
