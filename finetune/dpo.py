"""DPO with a frozen reference model, IPO, and cDPO (conservative DPO) over `trl.DPOTrainer`.

cDPO (Mitchell, 2023) assumes each preference label is flipped with probability ε:

    L_cDPO = -(1-ε)·log σ(βΔ) - ε·log σ(-βΔ)        (Δ = chosen log-ratio - rejected log-ratio)

TRL 1.16 silently ignores `label_smoothing` for `loss_type="sigmoid"`, so a plain DPOConfig with
label_smoothing=0.1 trains ordinary DPO. `CDPOTrainer` trains the cDPO loss exactly, reusing TRL's own
loss terms: with S = -log σ(βΔ) ("sigmoid") and R = [-(1-ε)·log σ(βΔ) + ε·log σ(-βΔ)]/(1-2ε)
("robust", which does read label_smoothing), the identity -log σ(-x) = -log σ(x) + x gives

    S = -log σ(βΔ),  R = S - ε/(1-2ε)·βΔ,  L_cDPO = S + ε·βΔ = (2-2ε)·S - (1-2ε)·R

so `loss_type=["sigmoid", "robust"]` with weights [2-2ε, -(1-2ε)] is cDPO, term for term, with every
TRL feature (reference handling, metrics, MoE aux loss) intact. `tests/test_finetune_preference.py`
checks the value against the formula and against plain DPO.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import trl

from tfgrpo.finetune.adapters import BASE_CHANGING_INITS, AdapterArguments, build_peft_config
from tfgrpo.finetune.longlora import enable_for_config

# TRL 1.16 loss types whose formula reads `label_smoothing`; every other loss type ignores it.
LABEL_SMOOTHING_LOSSES = ("exo_pair", "robust", "aot", "aot_unpaired")


@dataclass
class DPOFinetuneConfig(trl.DPOConfig, AdapterArguments):
    """`trl.DPOConfig` plus adapter settings. The reference model is the frozen starting point."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check_adapter_arguments()
        if self.beta <= 0:
            raise ValueError(f"beta must be > 0 (got {self.beta}); 0.1 is the usual DPO value")
        if (
            self.label_smoothing
            and not isinstance(self, CDPOFinetuneConfig)
            and not set(self.loss_type) & set(LABEL_SMOOTHING_LOSSES)
        ):
            raise ValueError(
                f"label_smoothing={self.label_smoothing} is ignored by loss_type {self.loss_type}; use "
                "method cdpo for label-smoothed (conservative) DPO"
            )


@dataclass
class IPOFinetuneConfig(DPOFinetuneConfig):
    """IPO (Azar et al., 2023): squared loss towards a 1/(2β) margin; robust to deterministic preferences."""

    loss_type: list[str] = field(default_factory=lambda: ["ipo"], metadata={"help": "IPO loss (fixed)."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.loss_type != ["ipo"]:
            raise ValueError(f"IPO uses loss_type ['ipo'] (got {self.loss_type}); use method dpo for other losses")


@dataclass
class CDPOFinetuneConfig(DPOFinetuneConfig):
    """cDPO: DPO with label smoothing ε, the assumed probability that a preference label is wrong."""

    label_smoothing: float = field(default=0.1, metadata={"help": "ε of cDPO, in (0, 0.5): label-noise rate."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 < self.label_smoothing < 0.5:
            raise ValueError(f"cDPO needs 0 < label_smoothing < 0.5 (got {self.label_smoothing}); 0.1 is typical")
        if self.loss_type != ["sigmoid"]:
            raise ValueError(
                f"cDPO smooths the sigmoid DPO loss; leave loss_type at ['sigmoid'] (got {self.loss_type})"
            )


def cdpo_loss_mix(label_smoothing: float) -> tuple[list[str], list[float]]:
    """TRL loss types and weights whose sum is the cDPO loss (derivation in the module docstring)."""
    eps = label_smoothing
    return ["sigmoid", "robust"], [2.0 - 2.0 * eps, -(1.0 - 2.0 * eps)]


class CDPOTrainer(trl.DPOTrainer):
    """`trl.DPOTrainer` that really applies label smoothing: trains L_cDPO = -(1-ε)logσ(βΔ) - ε·logσ(-βΔ)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.loss_types, self.loss_weights = cdpo_loss_mix(self.label_smoothing)


def build_dpo_trainer(
    config: DPOFinetuneConfig, model: Any, tokenizer: Any, train_dataset: Any, callbacks: list[Any] | None = None
) -> trl.DPOTrainer:
    enable_for_config(model, config)
    peft_config = build_peft_config(config)
    # With an adapter, TRL's reference is the base model with the adapter switched off (frozen by construction);
    # in full fine-tuning, and with PiSSA/OLoRA (adapter off = the residual weights, not the base), we hand it a
    # frozen copy of the starting weights.
    ref_model = (
        None
        if peft_config is not None and config.peft not in BASE_CHANGING_INITS
        else copy.deepcopy(model).eval().requires_grad_(False)
    )
    trainer_cls = CDPOTrainer if isinstance(config, CDPOFinetuneConfig) else trl.DPOTrainer
    return trainer_cls(
        model=model,
        ref_model=ref_model,
        args=config,
        train_dataset=train_dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=callbacks,
    )
