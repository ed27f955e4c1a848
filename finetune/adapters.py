"""Which parameters train: full fine-tuning, LoRA and its variants (rsLoRA, DoRA, PiSSA, OLoRA, LongLoRA), QLoRA.

`AdapterArguments` is mixed into every method's config, so `--peft dora --lora-r 16` means the same
thing for SFT, DPO or GRPO. `build_peft_config` turns it into a `peft.LoraConfig` (or `None` for full
fine-tuning); `choose_quantization` states the automatic 4-bit / 8-bit rule used by QLoRA.

PiSSA and OLoRA initialise the adapter from the weights themselves and subtract that part from the base
(W = W_res + B0·A0). Saved as they are, such an adapter only makes sense on W_res, which nobody has; so
`save_adapter` converts it on save (peft's `path_initial_model_for_weight_conversion`) into a plain
LoRA delta of rank 2r that applies to the unmodified base model.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

PEFT_METHODS = ("lora", "rslora", "dora", "pissa", "olora", "longlora", "qlora", "none")
# Initialisations that move part of the base weights into the adapter (the base becomes a residual).
BASE_CHANGING_INITS = ("pissa", "olora")
QUANTIZATION_CHOICES = ("auto", "4bit", "8bit")

# LongLoRA trains embeddings and normalisation layers in full next to the LoRA matrices (paper §3.3:
# "trainable embedding and normalization layers" are what make low-rank context extension work).
LONGLORA_TRAINABLE_MODULES = ["embed_tokens", "input_layernorm", "post_attention_layernorm", "norm"]

# Bytes per parameter of the stored weights, quantisation constants included (NF4 + double quant ≈ 4.1 bits).
BYTES_PER_PARAM = {"8bit": 1.0, "4bit": 0.52}
# The weights may take at most this share of memory; the rest is for activations, the adapter and its
# optimizer state, and (RL methods) generation.
WEIGHT_MEMORY_SHARE = 0.25


@dataclass
class AdapterArguments:
    """Adapter / quantisation settings shared by every method (mixed into each method's config)."""

    peft: str = field(
        default="lora",
        metadata={
            "help": "Trainable parameters: lora, rslora (alpha/sqrt(r) scaling), dora (weight-decomposed), "
            "pissa (principal-singular-vector init), olora (QR init); both saved as a plain LoRA delta on the "
            "unmodified base, longlora (LoRA + shifted sparse attention + trainable "
            "embeddings and norms), qlora (LoRA on a 4/8-bit base), or none (full fine-tuning)."
        },
    )
    lora_r: int = field(default=16, metadata={"help": "LoRA rank r (8-64 is the usual range)."})
    lora_alpha: int = field(
        default=32,
        metadata={"help": "LoRA alpha (16-32 usual); the update is scaled by alpha/r, or alpha/sqrt(r) for rslora."},
    )
    lora_dropout: float = field(default=0.0, metadata={"help": "Dropout on the LoRA input (PiSSA needs 0)."})
    lora_target_modules: list[str] | None = field(
        default=None,
        metadata={
            "help": "Module names that get LoRA matrices, e.g. [q_proj, v_proj]; None = every linear layer "
            "except the output head ('all-linear')."
        },
    )
    quantization: str = field(
        default="auto",
        metadata={
            "help": "QLoRA base-model precision: 4bit (NF4 + double quantisation), 8bit (LLM.int8), or auto: "
            "8bit when the 8-bit weights fit in 25% of available memory, else 4bit."
        },
    )
    s2_group_size_ratio: float = field(
        default=0.25,
        metadata={
            "help": "LongLoRA shifted sparse attention: each attention group spans this fraction of the "
            "sequence during training (the paper uses 1/4)."
        },
    )

    def check_adapter_arguments(self) -> None:
        if self.peft not in PEFT_METHODS:
            raise ValueError(f"peft={self.peft!r} is not one of {', '.join(PEFT_METHODS)}")
        if self.lora_r < 1:
            raise ValueError(f"lora_r must be >= 1 (got {self.lora_r}); 8-64 is the usual range")
        if self.lora_alpha <= 0:
            raise ValueError(f"lora_alpha must be > 0 (got {self.lora_alpha})")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise ValueError(f"lora_dropout must be in [0, 1) (got {self.lora_dropout})")
        if self.peft in BASE_CHANGING_INITS and self.lora_dropout != 0.0:
            raise ValueError(
                f"{self.peft} initialises the adapter from the weights themselves and assumes "
                "lora_dropout=0; set lora_dropout: 0"
            )
        self._refuse_ignored_adapter_options()
        if self.quantization not in QUANTIZATION_CHOICES:
            raise ValueError(f"quantization={self.quantization!r} is not one of {', '.join(QUANTIZATION_CHOICES)}")
        if self.quantization != "auto" and self.peft != "qlora":
            raise ValueError(
                f"quantization={self.quantization!r} only applies with peft=qlora (got peft={self.peft!r})"
            )
        if not 0.0 < self.s2_group_size_ratio <= 1.0:
            raise ValueError(f"s2_group_size_ratio must be in (0, 1] (got {self.s2_group_size_ratio})")

    def _refuse_ignored_adapter_options(self) -> None:
        """Adapter options the chosen `peft` would ignore are an error, not a silent no-op."""
        defaults = {f.name: f.default for f in AdapterArguments.__dataclass_fields__.values()}
        if self.peft == "none":
            changed = [
                key
                for key in ("lora_r", "lora_alpha", "lora_dropout", "lora_target_modules")
                if getattr(self, key) != defaults[key]
            ]
            if changed:
                raise ValueError(
                    f"{', '.join(changed)} only apply to an adapter, and peft=none is full fine-tuning; "
                    "use peft lora (or another adapter) to set them"
                )
        if self.peft != "longlora" and self.s2_group_size_ratio != defaults["s2_group_size_ratio"]:
            raise ValueError(
                f"s2_group_size_ratio only applies to shifted sparse attention; use peft longlora "
                f"(got peft={self.peft!r})"
            )


def build_peft_config(args: AdapterArguments) -> Any:
    """A `peft.LoraConfig` for `args.peft`, or None for full fine-tuning."""
    if args.peft == "none":
        return None
    from peft import LoraConfig

    options: dict[str, Any] = dict(
        r=args.lora_r,
        lora_alpha=args.lora_alpha,
        lora_dropout=args.lora_dropout,
        target_modules=args.lora_target_modules or "all-linear",
        task_type="CAUSAL_LM",
    )
    if args.peft == "rslora":
        options["use_rslora"] = True
    elif args.peft == "dora":
        options["use_dora"] = True
    elif args.peft == "pissa":
        # Fast randomised SVD (4 subspace iterations): seconds instead of minutes on a 7B model.
        options["init_lora_weights"] = "pissa_niter_4"
    elif args.peft == "olora":
        options["init_lora_weights"] = "olora"
    elif args.peft == "longlora":
        options["modules_to_save"] = list(LONGLORA_TRAINABLE_MODULES)
    return LoraConfig(**options)


def save_initial_adapter(peft_model: Any, peft_name: str) -> str | None:
    """Before training: keep the adapter's starting weights (PiSSA/OLoRA only) in a temporary folder (the caller
    removes it), which `save_adapter` needs to express the trained adapter as a delta on the original base."""
    if peft_name not in BASE_CHANGING_INITS:
        return None
    folder = tempfile.mkdtemp(prefix=f"tfgrpo-{peft_name}-init-")
    config = peft_model.peft_config["default"]
    init = config.init_lora_weights
    config.init_lora_weights = True  # saved as a plain LoRA (peft refuses to re-run the SVD/QR on load)
    try:
        peft_model.save_pretrained(folder)
    finally:
        config.init_lora_weights = init
    return folder


def save_adapter(peft_model: Any, out: str | Path, initial_adapter: str | None) -> None:
    """Save the adapter into `out`; a PiSSA/OLoRA adapter as the equivalent plain LoRA delta (rank 2r) on the
    unmodified base model, so `PeftModel.from_pretrained(base, out)` is the trained model."""
    if initial_adapter is None:
        peft_model.save_pretrained(str(out))
    else:
        peft_model.save_pretrained(str(out), path_initial_model_for_weight_conversion=initial_adapter)


def choose_quantization(num_params: int, available_bytes: int, requested: str = "auto") -> str:
    """The QLoRA base precision: `requested` unless it is "auto", then the stated rule.

    Rule: 8-bit (closer to the full-precision model) when its weights take at most 25% of the available
    memory, otherwise 4-bit NF4 (half the bytes again). The 75% left is for activations, the adapter,
    its optimizer state and, for RL methods, generation.
    """
    if requested != "auto":
        return requested
    eight_bit_bytes = num_params * BYTES_PER_PARAM["8bit"]
    return "8bit" if eight_bit_bytes <= WEIGHT_MEMORY_SHARE * available_bytes else "4bit"


def available_memory_bytes() -> int:
    """Free accelerator memory on GPU 0, or free host memory when training on CPU."""
    import torch

    if torch.cuda.is_available():
        free, _total = torch.cuda.mem_get_info()
        return int(free)
    import os

    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def bnb_quantization_config(bits: str) -> Any:
    """bitsandbytes config: NF4 + double quantisation for 4-bit (QLoRA paper), LLM.int8 for 8-bit."""
    import torch
    from transformers import BitsAndBytesConfig

    if bits == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    compute_dtype = torch.bfloat16 if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else torch.float32
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=compute_dtype,
    )


def qlora_training_overrides() -> dict[str, Any]:
    """QLoRA's optimizer and memory settings; logs that paging does nothing on CPU instead of hiding it."""
    import torch

    if not torch.cuda.is_available():
        logger.warning(
            "QLoRA: paged AdamW pages optimizer state between GPU and CPU memory; on CPU there is "
            "nothing to page, so it runs as plain AdamW (a no-op, not an error)"
        )
    return {"optim": "paged_adamw_32bit", "gradient_checkpointing": True}
