"""Step time of our `finetune/` wrappers vs the same TRL trainer configured by hand, per method.

    OMP_NUM_THREADS=1 python benchmarks/finetune.py [--steps 20] [--rounds 6] [--methods sft,dpo,...]

Same tiny random-init model (Qwen2, hidden 64, 2 layers), same data, same LoRA, same hyper-parameters.
Each round trains both sides once (order alternating ABBA...), and each run reports its median optimizer
step in wall time and in process CPU time (`time.process_time`, all threads): CPU time is what the step
costs, and is far less disturbed than wall time by other jobs on shared cores. The overhead is the median
of the per-round paired ratios, with its spread. Target: overhead <= 5 %. PPO is compared with the
GRPOTrainer it builds on, so its extra cost is the critic (value head, GAE, reference pass), which is the
algorithm, not wrapper overhead; it is reported separately."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # two shared cores: more threads is 4-70x slower (ENVIRONMENT.md)
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import io  # noqa: E402
import logging  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

COMMON = dict(
    use_cpu=True, bf16=False, report_to="none", logging_steps=1000, save_strategy="no", seed=0, disable_tqdm=True
)
LORA = dict(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")


def user(text):
    return [{"role": "user", "content": text}]


def assistant(text):
    return [{"role": "assistant", "content": text}]


SFT = [{"prompt": user(f"What is {i} + {i}?"), "completion": assistant(f"so \\boxed{{{2 * i}}}")} for i in range(64)]
PAIRS = [
    {
        "prompt": user(f"What is {i} + {i}?"),
        "chosen": assistant(f"\\boxed{{{2 * i}}}"),
        "rejected": assistant(f"maybe {i + 3}"),
    }
    for i in range(64)
]
KTO = [
    {"prompt": p["prompt"], "completion": p[k], "label": k == "chosen"} for p in PAIRS for k in ("chosen", "rejected")
]
PROMPTS = [{"prompt": user(f"What is {i} + {i}?"), "answer": str(2 * i)} for i in range(64)]


def digit_reward(completions, **_):
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [sum(ch.isdigit() for ch in t) / max(len(t), 1) for t in texts]


def step_timer():
    """Wall time and process CPU time (all threads) of every optimizer step."""
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.wall: list[float] = []
            self.cpu: list[float] = []
            self._start = (0.0, 0.0)

        def on_step_begin(self, args, state, control, **kwargs):
            self._start = (time.perf_counter(), time.process_time())

        def on_step_end(self, args, state, control, **kwargs):
            self.wall.append(time.perf_counter() - self._start[0])
            self.cpu.append(time.process_time() - self._start[1])

    return StepTimer()


def ours(method, model, tokenizer, options):
    from datasets import Dataset

    from tfgrpo.finetune.run import build_method_config, load_method

    data = {"sft": SFT, "dpo": PAIRS, "cdpo": PAIRS, "kto": KTO, "orpo": PAIRS}.get(method, PROMPTS)
    _, builder = load_method(method)
    config = build_method_config(method, {**COMMON, **options, "peft": "lora", "lora_r": 16, "lora_alpha": 32})
    extra = {"reward_funcs": digit_reward} if method in ("grpo", "gspo", "ppo") else {}
    return builder(config, model, tokenizer, Dataset.from_list(data), **extra)


def by_hand(method, model, tokenizer, options):
    import trl
    from datasets import Dataset
    from peft import LoraConfig
    from trl.experimental.orpo import ORPOConfig, ORPOTrainer

    lora = LoraConfig(**LORA)
    args = {**COMMON, **options}
    if method == "sft":
        return trl.SFTTrainer(
            model=model,
            args=trl.SFTConfig(**args),
            train_dataset=Dataset.from_list(SFT),
            processing_class=tokenizer,
            peft_config=lora,
        )
    if method in ("dpo", "cdpo"):
        if method == "cdpo":  # the same loss mix our CDPOTrainer uses, set by hand
            args.update(loss_type=["sigmoid", "robust"], loss_weights=[1.8, -0.8], label_smoothing=0.1)
        return trl.DPOTrainer(
            model=model,
            args=trl.DPOConfig(**args),
            train_dataset=Dataset.from_list(PAIRS),
            processing_class=tokenizer,
            peft_config=lora,
        )
    if method == "kto":
        return trl.KTOTrainer(
            model=model,
            args=trl.KTOConfig(**args),
            train_dataset=Dataset.from_list(KTO),
            processing_class=tokenizer,
            peft_config=lora,
        )
    if method == "orpo":
        return ORPOTrainer(
            model=model,
            args=ORPOConfig(**args),
            train_dataset=Dataset.from_list(PAIRS),
            processing_class=tokenizer,
            peft_config=lora,
        )
    if method == "gspo":
        args.update(importance_sampling_level="sequence", loss_type="grpo", beta=0.04, epsilon=3e-4, epsilon_high=4e-4)
    if method == "ppo":
        args.update(num_generations=2, loss_type="bnpo")  # GRPO needs >= 2 samples; PPO's own default is 1
    return trl.GRPOTrainer(
        model=model,
        reward_funcs=[digit_reward],
        args=trl.GRPOConfig(**args),
        train_dataset=Dataset.from_list(PROMPTS),
        processing_class=tokenizer,
        peft_config=lora,
    )


def median_step(build, method, model_dir, tokenizer, options, steps, warmup=3):
    """(median wall s, median CPU s) per optimizer step of one training run, after `warmup` steps."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with tempfile.TemporaryDirectory() as out:
        trainer = build(method, model, tokenizer, {**options, "output_dir": out, "max_steps": steps + warmup})
        timer = step_timer()
        trainer.add_callback(timer)
        with contextlib.redirect_stdout(io.StringIO()):  # TRL prints every run's log dicts; keep the table readable
            trainer.train()
    return statistics.median(timer.wall[warmup:]), statistics.median(timer.cpu[warmup:])


def summarise(ours_runs: list[float], hand_runs: list[float]) -> tuple[str, str, str]:
    """Median [min-max] over rounds of both sides, and the median of the per-round paired ratios [min-max]:
    pairing cancels the slow minutes a busy neighbour causes, which hit both runs of a round alike."""

    def cell(xs):
        return f"{statistics.median(xs) * 1e3:.1f} [{min(xs) * 1e3:.1f}–{max(xs) * 1e3:.1f}]"

    ratios = [100 * (a / b - 1) for a, b in zip(ours_runs, hand_runs, strict=True)]
    overhead = f"{statistics.median(ratios):+.1f} % [{min(ratios):+.1f}, {max(ratios):+.1f}]"
    return cell(ours_runs), cell(hand_runs), overhead


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--methods", default="sft,dpo,cdpo,kto,orpo,grpo,gspo,ppo")
    parser.add_argument("--rounds", type=int, default=6, help="paired rounds per method (order ABBA...)")
    cli = parser.parse_args()
    logging.disable(logging.WARNING)

    from tests.helpers.tiny_models import build_tiny_tokenizer, tiny_model_dir

    tokenizer = build_tiny_tokenizer()
    model_dir = tiny_model_dir(tempfile.mkdtemp(), "qwen2")
    per_method = {
        "sft": dict(per_device_train_batch_size=8, max_length=64),
        "dpo": dict(per_device_train_batch_size=8),
        "cdpo": dict(per_device_train_batch_size=8),
        "kto": dict(per_device_train_batch_size=8),
        "orpo": dict(per_device_train_batch_size=8),
        "grpo": dict(per_device_train_batch_size=8, num_generations=4, max_completion_length=16),
        "gspo": dict(per_device_train_batch_size=8, num_generations=4, max_completion_length=16),
        "ppo": dict(per_device_train_batch_size=8, max_completion_length=16),
    }
    lines = [
        f"Median step over {cli.rounds} paired rounds of {cli.steps} steps (+3 warm-up) each, [min–max] over rounds; "
        f"overhead = median of per-round ours/TRL - 1 [min, max]. OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}.",
        "",
        "| method | ours wall ms | TRL wall ms | wall overhead | ours CPU ms | TRL CPU ms | CPU overhead |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for method in cli.methods.split(","):
        options = dict(per_method[method])
        runs = {"ours": [], "hand": []}
        for round_index in range(cli.rounds):
            # ABBA: alternate which side goes first, so a drift in machine load does not favour one side
            order = (
                (("ours", ours), ("hand", by_hand)) if round_index % 2 == 0 else (("hand", by_hand), ("ours", ours))
            )
            for side, build in order:
                runs[side].append(median_step(build, method, model_dir, tokenizer, options, cli.steps))
        wall = summarise([w for w, _ in runs["ours"]], [w for w, _ in runs["hand"]])
        cpu = summarise([c for _, c in runs["ours"]], [c for _, c in runs["hand"]])
        name = f"{method}*" if method == "ppo" else method
        lines.append(f"| {name} | {' | '.join(wall)} | {' | '.join(cpu)} |")
        print(lines[-1], file=sys.stderr, flush=True)  # progress; the table is printed at the end
    lines.append("")
    lines.append(
        "*PPO vs the GRPOTrainer it extends (G=2): its extra cost is the critic (value head, GAE, an extra "
        "policy + reference pass), i.e. the algorithm, not wrapper overhead."
    )
    print("\n".join(lines), flush=True)  # after training: TRL prints its own summaries while it runs


if __name__ == "__main__":
    main()
