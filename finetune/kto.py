"""KTO (Ethayarajh et al., 2024): binary thumbs up / down per completion, over `trl.KTOTrainer`."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import trl

from tfgrpo.finetune.adapters import BASE_CHANGING_INITS, AdapterArguments, build_peft_config
from tfgrpo.finetune.longlora import enable_for_config


@dataclass
class KTOFinetuneConfig(trl.KTOConfig, AdapterArguments):
    """`trl.KTOConfig` plus adapter settings. Rows: prompt, completion, label (bool)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check_adapter_arguments()
        if self.desirable_weight <= 0 or self.undesirable_weight <= 0:
            raise ValueError(
                "desirable_weight and undesirable_weight must be > 0; balance them by the label ratio "
                "(the KTO paper keeps weight·count within 1-4/3 of each other)"
            )


def build_kto_trainer(
    config: KTOFinetuneConfig, model: Any, tokenizer: Any, train_dataset: Any, callbacks: list[Any] | None = None
) -> trl.KTOTrainer:
    labels = set(train_dataset["label"])
    if labels != {True, False}:
        raise ValueError(f"KTO needs both desirable and undesirable examples; the data has only label(s) {labels}")
    enable_for_config(model, config)
    peft_config = build_peft_config(config)
    # Adapter off is the reference, except in full fine-tuning and PiSSA/OLoRA (adapter off = residual weights).
    ref_model = (
        None
        if peft_config is not None and config.peft not in BASE_CHANGING_INITS
        else copy.deepcopy(model).eval().requires_grad_(False)
    )
    return trl.KTOTrainer(
        model=model,
        ref_model=ref_model,
        args=config,
        train_dataset=train_dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=callbacks,
    )
