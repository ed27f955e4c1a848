"""Gradient fine-tuning baselines (SFT, DPO/IPO/cDPO, KTO, ORPO, PPO, GRPO, GSPO) over TRL + peft + bitsandbytes.

Each method is one config dataclass subclassing TRL's own config plus one thin builder returning a
TRL trainer (`finetune/<method>.py`); `tfgrpo.finetune.run.run_finetune` reads the data, loads the model,
builds the trainer, trains, saves the adapter and writes `finetune_summary.json`.

Nothing heavy is imported here: torch, transformers, trl and peft load only when a method runs.
"""

from __future__ import annotations

from tfgrpo.finetune.errors import FinetuneDataError, FinetuneError

METHODS = ("sft", "dpo", "ipo", "cdpo", "kto", "orpo", "ppo", "grpo", "gspo")
PEFT_CHOICES = ("lora", "rslora", "dora", "pissa", "olora", "longlora", "qlora", "none")

__all__ = ["METHODS", "PEFT_CHOICES", "FinetuneDataError", "FinetuneError"]
