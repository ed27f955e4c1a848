"""SFT: full fine-tuning, LoRA, rsLoRA, DoRA, PiSSA, LongLoRA and QLoRA over `trl.SFTTrainer`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import trl

from tfgrpo.finetune.adapters import AdapterArguments, build_peft_config
from tfgrpo.finetune.longlora import enable_for_config


@dataclass
class SFTFinetuneConfig(trl.SFTConfig, AdapterArguments):
    """`trl.SFTConfig` plus the shared adapter settings. Rows: TRL prompt/completion (loss on the completion)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check_adapter_arguments()
        if self.peft == "longlora" and self.padding_free:
            raise ValueError("LongLoRA's shifted sparse attention needs padded batches; set padding_free: false")


class LossTokenCountingSFTTrainer(trl.SFTTrainer):
    """`trl.SFTTrainer` that counts the tokens its training loss is computed on (labels not -100, after the
    one-token shift): with prompt/completion rows, the completion tokens only."""

    tokens_in_loss_total = 0  # this process's count; `tfgrpo.finetune.run` sums it over processes

    def compute_loss(
        self, model: Any, inputs: Any, return_outputs: bool = False, num_items_in_batch: Any = None
    ) -> Any:
        labels = inputs.get("labels") if model.training else None
        if labels is not None:
            self.tokens_in_loss_total += int((labels[..., 1:] != -100).sum().item())
        return super().compute_loss(
            model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch
        )


def build_sft_trainer(
    config: SFTFinetuneConfig, model: Any, tokenizer: Any, train_dataset: Any, callbacks: list[Any] | None = None
) -> trl.SFTTrainer:
    enable_for_config(model, config)
    return LossTokenCountingSFTTrainer(
        model=model,
        args=config,
        train_dataset=train_dataset,
        processing_class=tokenizer,
        peft_config=build_peft_config(config),
        callbacks=callbacks,
    )
