"""ORPO (Hong et al., 2024): SFT plus an odds-ratio preference term, no reference model.

In TRL 1.16 ORPO lives in `trl.experimental.orpo` (imported here only; TRL_EXPERIMENTAL_SILENCE=1 hides
the "experimental" notice).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trl.experimental.orpo import ORPOConfig, ORPOTrainer

from tfgrpo.finetune.adapters import AdapterArguments, build_peft_config
from tfgrpo.finetune.longlora import enable_for_config


@dataclass
class ORPOFinetuneConfig(ORPOConfig, AdapterArguments):
    """`trl.experimental.orpo.ORPOConfig` plus adapter settings; `beta` is ORPO's λ (odds-ratio weight)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check_adapter_arguments()
        if self.beta <= 0:
            raise ValueError(f"beta (ORPO's lambda) must be > 0 (got {self.beta}); the paper uses 0.1-0.25")


def build_orpo_trainer(
    config: ORPOFinetuneConfig, model: Any, tokenizer: Any, train_dataset: Any, callbacks: list[Any] | None = None
) -> ORPOTrainer:
    enable_for_config(model, config)
    return ORPOTrainer(
        model=model,
        args=config,
        train_dataset=train_dataset,
        processing_class=tokenizer,
        peft_config=build_peft_config(config),
        callbacks=callbacks,
    )
