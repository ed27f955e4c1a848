"""One cell of the method x adapter matrix: overfit a handful of examples on a tiny random-init model and
measure the method's own objective before and after (shared by tests/finetune/test_finetune_learning.py and
benchmarks/finetune_matrix.py).

    model_dir = learnable_model_dir(tmp_path, tokenizer)
    result = run_cell("dpo", "lora", model_dir, tokenizer, out_dir)
    result.before, result.after, result.improved   # objective at the first step, mean of the last 3 steps

Objectives (what each method optimises, as TRL logs it) and the stated margin a cell must beat:

| method            | objective (log key)                         | better | margin  |
|-------------------|---------------------------------------------|--------|---------|
| sft               | completion NLL, nats/token (`loss`)         | lower  | 2.0     |
| dpo / ipo / cdpo  | preference margin β·Δ (`rewards/margins`)   | higher | 1.0     |
| kto               | KTO loss (`loss`, 0.5 at the start)         | lower  | 0.2     |
| orpo              | ORPO loss, NLL + λ·odds-ratio term (`loss`) | lower  | 2.0     |
| grpo / gspo / ppo | reward: share of digits in the completion   | higher | 0.2     |

"before" is the first logged step (the objective before any update; for the sampled RL reward, the mean of
the first 3 steps); "after" is the mean of the last 3 steps.

The RL reward is one a random tiny model can climb in a few dozen steps: digits are frequent tokens of
its vocabulary, so sampling finds some, and reinforcing them raises the share. The model is the tiny
Qwen2 of tests/helpers/tiny_models.py with a larger initialisation (std 0.3 instead of 0.02): with std 0.02 the
random output head caps the logits at about ±1.3, so a method that trains adapters only (the head is not
an adapter target) cannot move the NLL or the policy by much in a few dozen steps, whatever it does.
"""

from __future__ import annotations

import contextlib
import io
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.helpers.tiny_models import tiny_config

METHODS = ("sft", "dpo", "ipo", "cdpo", "kto", "orpo", "grpo", "gspo", "ppo")
ADAPTERS = ("lora", "rslora", "dora", "pissa", "olora", "longlora", "qlora", "none")
COMMON = dict(
    use_cpu=True, bf16=False, report_to="none", logging_steps=1, save_strategy="no", seed=0, disable_tqdm=True
)
LAST = 3  # "after" = mean over the last LAST logged steps (RL rewards are sampled: a single step is noisy)


@dataclass(frozen=True)
class Objective:
    key: str
    higher_is_better: bool
    margin: float
    description: str


OBJECTIVES = {
    "sft": Objective("loss", False, 2.0, "SFT NLL"),
    "dpo": Objective("rewards/margins", True, 1.0, "preference margin"),
    "ipo": Objective("rewards/margins", True, 1.0, "preference margin"),
    "cdpo": Objective("rewards/margins", True, 1.0, "preference margin"),
    "kto": Objective("loss", False, 0.2, "KTO loss"),
    "orpo": Objective("loss", False, 2.0, "ORPO loss"),
    "grpo": Objective("reward", True, 0.2, "digit reward"),
    "gspo": Objective("reward", True, 0.2, "digit reward"),
    "ppo": Objective("reward", True, 0.2, "digit reward"),
}


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def assistant(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


SFT_ROWS = [
    {"prompt": user(f"What is {i} + {i}?"), "completion": assistant(f"so \\boxed{{{2 * i}}}")} for i in range(4)
]
PAIRS = [
    {
        "prompt": user(f"What is {i} + {i}?"),
        "chosen": assistant(f"\\boxed{{{2 * i}}}"),
        "rejected": assistant(f"maybe {i + 3} then"),
    }
    for i in range(4)
]
KTO_ROWS = [
    {"prompt": p["prompt"], "completion": p[key], "label": key == "chosen"}
    for p in PAIRS
    for key in ("chosen", "rejected")
]
PROMPTS = [{"prompt": user(f"What is {i} + {i}?"), "answer": str(2 * i)} for i in range(4)]


def digit_reward(completions: list[Any], **_: Any) -> list[float]:
    """Share of digits in the completion."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [sum(ch.isdigit() for ch in t) / max(len(t), 1) for t in texts]


def cell_options(method: str, peft: str) -> dict[str, Any]:
    """Hyper-parameters that overfit the tiny model within a few dozen steps (adapters get a larger step)."""
    lr = 1e-2 if peft == "none" else 3e-2  # full fine-tuning moves every weight: a smaller step
    options: dict[str, Any] = dict(
        peft=peft, learning_rate=lr, lr_scheduler_type="constant", max_steps=20, per_device_train_batch_size=4
    )
    if peft != "none":
        options.update(lora_r=8, lora_alpha=16)
    if method == "kto":
        options["per_device_train_batch_size"] = 8
    if method in ("grpo", "gspo", "ppo"):
        options.update(
            # 45 steps: with transformers 5.25 / accelerate 1.16 GSPO and PPO gained 0.19 and 0.15 in 30 steps,
            # under the 0.2 margin (and passed before); every RL cell clears it in 45
            max_steps=45,
            per_device_train_batch_size=8,
            max_completion_length=8,
            temperature=1.0,
            num_generations=1 if method == "ppo" else 4,
        )
    if method == "ppo":
        # Without the KL penalty (0.05 by default; tests/finetune/test_finetune_methods.py checks it): in 45 steps it
        # outweighs a reward in [0, 1] as soon as the policy moves. Value head and GAE are PPO's own.
        options["kl_coef"] = 0.0
    return options


def learnable_model_dir(root: Any, tokenizer: Any) -> Path:
    """The tiny Qwen2 (tests/helpers/tiny_models.py) with initialisation std 0.3, saved with its tokenizer under `root`."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    path = Path(root) / "tiny-qwen2-learnable"
    path.mkdir(parents=True, exist_ok=True)
    config = tiny_config(tokenizer, "qwen2")
    config.initializer_range = 0.3
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config = GenerationConfig(
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id
    )
    model.save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    return path


@dataclass
class CellResult:
    method: str
    peft: str
    before: float
    after: float
    wall_s: float
    objective: Objective

    @property
    def gain(self) -> float:
        return self.after - self.before if self.objective.higher_is_better else self.before - self.after

    @property
    def improved(self) -> bool:
        return self.gain >= self.objective.margin


def run_cell(method: str, peft: str, model_dir: Any, tokenizer: Any, out_dir: Any, **overrides: Any) -> CellResult:
    """Train one cell through our own config + builder (as `run_finetune` does) and read its objective."""
    import torch
    from datasets import Dataset

    from tfgrpo.finetune import adapters
    from tfgrpo.finetune.models import ModelSource, load_model
    from tfgrpo.finetune.run import METHOD_SPECS, build_method_config, load_method

    started = time.perf_counter()
    _, builder = load_method(method)
    options = {**COMMON, **cell_options(method, peft), "output_dir": str(out_dir), **overrides}
    quantization = None
    if peft == "qlora":
        options.update(adapters.qlora_training_overrides())
        quantization = adapters.bnb_quantization_config("4bit")
    config = build_method_config(method, options)
    torch.manual_seed(0)
    model = load_model(ModelSource(str(model_dir)), quantization_config=quantization)
    kind = METHOD_SPECS[method].data
    rows = {"sft": SFT_ROWS, "pairs": PAIRS, "kto": KTO_ROWS, "prompts": PROMPTS * 4}[kind]
    extra = {"reward_funcs": digit_reward} if kind == "prompts" else {}
    trainer = builder(config, model, tokenizer, Dataset.from_list(rows), **extra)
    with contextlib.redirect_stdout(io.StringIO()):  # TRL prints every log dict
        trainer.train()
    objective = OBJECTIVES[method]
    values = [h[objective.key] for h in trainer.state.log_history if objective.key in h and "train_runtime" not in h]
    before = values[0] if objective.key != "reward" else sum(values[:LAST]) / LAST
    after = sum(values[-LAST:]) / LAST
    return CellResult(method, peft, before, after, time.perf_counter() - started, objective)
