"""The vector store of a library: chromadb `PersistentClient` on disk, with an offline embedder.

Used for dedup (nearest neighbour of a new lesson, near-duplicate groups of a whole library) and for
retrieval injection (`topk:K`: the K experiences nearest to the query). Cosine similarity throughout
(vectors are unit length; similarity = 1 - chromadb's cosine distance). The store mirrors one library:
`sync(library)` adds, re-embeds and deletes so the collection matches it, embedding only what changed.
"""

from __future__ import annotations

import hashlib
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from tfgrpo.experiences.embedders import Embedder, OnnxMiniLMEmbedder
from tfgrpo.experiences.errors import ExperienceError
from tfgrpo.experiences.model import Library

if TYPE_CHECKING:  # chromadb is heavy: imported lazily at run time
    from chromadb.api.types import PyEmbeddings

DEFAULT_COLLECTION = "experiences"
_VECTOR_CACHE_SIZE = 2048  # ~3 MB of float32 MiniLM vectors
# Replaced ids a collection tolerates before a rebuild, however small it is. Not lower: each rebuild (a
# delete_collection and a create) leaks ~3 MB of the process's memory in chromadb 1.5
# (chroma-core/chroma#3296); 1024 keeps queries within ~10 % of a fresh index (benchmarks/store_churn.py).
COMPACT_AFTER = 1024


class Match(BaseModel):
    id: str
    text: str
    similarity: float


def _chroma_embedding_function(embedder: Embedder) -> Any:
    """Wrap an embedder as a chromadb EmbeddingFunction (chromadb's default one needs the network)."""
    from chromadb.api.types import EmbeddingFunction

    class _Adapter(EmbeddingFunction):
        def __init__(self, inner: Embedder) -> None:
            self.inner = inner

        def __call__(self, input: Sequence[str]) -> list[Any]:  # noqa: A002  (chromadb's parameter name)
            import numpy as np

            return [np.asarray(v, dtype=np.float32) for v in self.inner.embed(list(input))]

        @staticmethod
        def name() -> str:
            return "tfgrpo-experiences"

        def get_config(self) -> dict[str, Any]:
            return {"embedder": self.inner.name}

        @staticmethod
        def build_from_config(config: dict[str, Any]) -> Any:
            raise ExperienceError("reopen the store through tfgrpo.experiences.store.ExperienceStore with an embedder")

    return _Adapter(embedder)


class ExperienceStore:
    """A chromadb collection mirroring a library.

    `path`: a folder (created), e.g. `run/library.chroma/`; None keeps the store in memory for this
    process only (each such store gets its own collection, so two never see each other's data).
    """

    def __init__(
        self, path: str | Path | None, *, embedder: Embedder | None = None, collection: str = DEFAULT_COLLECTION
    ) -> None:
        import chromadb
        from chromadb.config import Settings

        self.path = Path(path) if path is not None else None
        self.embedder = embedder or OnnxMiniLMEmbedder()
        settings = Settings(anonymized_telemetry=False, allow_reset=False)
        if self.path is None:
            self._client = chromadb.EphemeralClient(settings=settings)
            collection = f"{collection}-{uuid.uuid4().hex}"  # in-memory clients of one process share collections
        else:
            self._client = chromadb.PersistentClient(path=str(self.path), settings=settings)
        self._embedding_function = _chroma_embedding_function(self.embedder)
        self._collection = self._open_collection(collection)
        self._replaced_since_build = 0  # deleted or re-embedded ids since the collection was (re)built
        stored = (self._collection.metadata or {}).get("embedder")
        if stored and stored != self.embedder.name:
            raise ExperienceError(
                f"store {self.path} was built with embedder {stored!r}, not {self.embedder.name!r}; use a new folder or the same embedder"
            )
        self._synced: str | None = None
        self._vectors: OrderedDict[str, Any] = OrderedDict()  # text -> float32 vector, most recent last

    def _open_collection(self, name: str) -> Any:
        return self._client.get_or_create_collection(
            name=name,
            configuration={"hnsw": {"space": "cosine"}},
            embedding_function=self._embedding_function,
            metadata={"embedder": self.embedder.name},
        )

    @classmethod
    def opened_warm(cls, path: str | Path | None, **kwargs: Any) -> ExperienceStore:
        """A store whose embedding model is already loaded and has run once: what a caller builds in a
        background thread so the cold start (seconds) is not paid on its critical path."""
        store = cls(path, **kwargs)
        load = getattr(store.embedder, "load", None)
        if callable(load):  # a local model; a remote endpoint has nothing to warm
            load()
            store.embedder.embed(["warm-up"])
        return store

    @classmethod
    def for_library(cls, library_path: str | Path, **kwargs: Any) -> ExperienceStore:
        """The conventional store folder beside a library file: `run/library.json` -> `run/library.chroma/`."""
        path = Path(library_path)
        return cls(path.with_name(f"{path.stem}.chroma"), **kwargs)

    def __len__(self) -> int:
        return self._collection.count()

    def embed(self, texts: Sequence[str]) -> PyEmbeddings:
        """Embed through a small cache: a lesson screened for dedup is not embedded again when added,
        and the G samples of one problem share one query embedding under `topk` injection."""
        import numpy as np

        missing = list(dict.fromkeys(t for t in texts if t not in self._vectors))
        fresh = dict(zip(missing, self.embedder.embed(missing), strict=False)) if missing else {}
        vectors: PyEmbeddings = []
        for text in texts:
            if text in fresh:
                vectors.append(fresh[text])
                self._vectors[text] = np.asarray(fresh[text], dtype=np.float32)
            else:
                self._vectors.move_to_end(text)
                vectors.append(self._vectors[text].tolist())
        while len(self._vectors) > _VECTOR_CACHE_SIZE:
            self._vectors.popitem(last=False)
        return vectors

    # -- keeping it in step with a library --------------------------------------------------------
    def sync(self, library: Library) -> None:
        """Make the collection hold exactly the library's experiences (re-embedding changed texts only)."""
        fingerprint = library_fingerprint(library)
        if fingerprint == self._synced:
            return
        stored = self._collection.get(include=["documents"])
        have = dict(zip(stored["ids"], stored["documents"] or [], strict=False))
        want = {e.id: e.text for e in library.experiences}
        stale = [i for i in have if i not in want]
        changed = [i for i, text in want.items() if have.get(i) != text]
        if stale:
            self._collection.delete(ids=stale)
        if changed:
            self.upsert({i: want[i] for i in changed})
        self._replaced_since_build += len(stale) + sum(1 for i in changed if i in have)
        self._compact_if_bloated()
        self._synced = fingerprint

    def _compact_if_bloated(self) -> None:
        """Rebuild the collection once it has replaced more ids than it holds (at least COMPACT_AFTER).

        chromadb's HNSW index keeps a deleted or re-embedded element in its graph, marked deleted, and every
        query still walks it: a learn run that replaces ~80 of 100 lessons a step made a store query 8x slower
        after 60 steps (benchmarks/store_churn.py). The rebuild re-inserts the stored vectors (nothing is
        embedded again) into a fresh collection of the same name; the store is derived from the library, so
        a crash half-way costs only a re-sync."""
        count = self._collection.count()
        if self._replaced_since_build <= max(count, COMPACT_AFTER):
            return
        stored = self._collection.get(include=["documents", "embeddings"])
        name = self._collection.name
        self._client.delete_collection(name)
        self._collection = self._open_collection(name)
        if stored["ids"]:
            self._collection.upsert(ids=stored["ids"], documents=stored["documents"], embeddings=stored["embeddings"])
        self._replaced_since_build = 0

    def upsert(
        self, texts: dict[str, str], *, vectors: Sequence[Sequence[float]] | None = None, batch_size: int = 2048
    ) -> None:
        """Add or replace experiences by id; `vectors` (same order as `texts`) skips re-embedding texts already embedded."""
        ids = list(texts)
        if vectors is not None and len(vectors) != len(ids):
            raise ExperienceError(f"upsert: {len(vectors)} vectors for {len(ids)} texts")
        for start in range(0, len(ids), batch_size):
            chunk = ids[start : start + batch_size]
            documents = [texts[i] for i in chunk]
            embeddings: PyEmbeddings = (
                [list(v) for v in vectors[start : start + batch_size]]
                if vectors is not None
                else self.embed(documents)
            )
            self._collection.upsert(ids=chunk, documents=documents, embeddings=embeddings)
        self._synced = None

    def delete(self, ids: Sequence[str]) -> None:
        if ids:
            self._collection.delete(ids=list(ids))
            self._replaced_since_build += len(ids)
            self._compact_if_bloated()
            self._synced = None

    # -- queries -------------------------------------------------------------------------------------
    def query(self, text: str, *, k: int = 8, exclude: Sequence[str] = ()) -> list[Match]:
        """The k nearest experiences to `text`, most similar first."""
        return self.query_many([text], k=k, exclude=exclude)[0]

    def query_many(self, texts: Sequence[str], *, k: int = 8, exclude: Sequence[str] = ()) -> list[list[Match]]:
        count = len(self)
        if not texts:
            return []
        if count == 0:
            return [[] for _ in texts]
        n_results = min(count, k + len(exclude))
        result = self._collection.query(
            query_embeddings=self.embed(list(texts)), n_results=n_results, include=["documents", "distances"]
        )
        assert result["documents"] is not None and result["distances"] is not None  # both asked for in `include`
        skip = set(exclude)
        out: list[list[Match]] = []
        for ids, documents, distances in zip(result["ids"], result["documents"], result["distances"], strict=False):
            matches = [
                Match(id=i, text=d, similarity=1.0 - float(dist))
                for i, d, dist in zip(ids, documents, distances, strict=False)
                if i not in skip
            ]
            out.append(matches[:k])
        return out

    def query_vectors(self, vectors: Sequence[Sequence[float]], *, k: int = 8) -> list[list[Match]]:
        """Like `query_many`, for texts the caller has already embedded with `self.embedder`."""
        count = len(self)
        if not vectors or count == 0:
            return [[] for _ in vectors]
        embeddings: PyEmbeddings = [list(v) for v in vectors]
        result = self._collection.query(
            query_embeddings=embeddings, n_results=min(count, k), include=["documents", "distances"]
        )
        assert result["documents"] is not None and result["distances"] is not None  # both asked for in `include`
        return [
            [
                Match(id=i, text=d, similarity=1.0 - float(dist))
                for i, d, dist in zip(ids, documents, distances, strict=False)
            ]
            for ids, documents, distances in zip(result["ids"], result["documents"], result["distances"], strict=False)
        ]

    def nearest(self, text: str, *, exclude: Sequence[str] = ()) -> Match | None:
        matches = self.query(text, k=1, exclude=exclude)
        return matches[0] if matches else None

    def neighbours_of_all(self, *, k: int = 5) -> dict[str, list[Match]]:
        """For every stored experience, its k nearest others (from stored vectors; nothing re-embedded)."""
        stored = self._collection.get(include=["embeddings"])
        if not stored["ids"]:
            return {}
        n_results = min(len(stored["ids"]), k + 1)
        result = self._collection.query(
            query_embeddings=stored["embeddings"], n_results=n_results, include=["documents", "distances"]
        )
        assert result["documents"] is not None and result["distances"] is not None  # both asked for in `include`
        neighbours: dict[str, list[Match]] = {}
        for own, ids, documents, distances in zip(
            stored["ids"], result["ids"], result["documents"], result["distances"], strict=False
        ):
            neighbours[own] = [
                Match(id=i, text=d, similarity=1.0 - float(dist))
                for i, d, dist in zip(ids, documents, distances, strict=False)
                if i != own
            ][:k]
        return neighbours


def library_fingerprint(library: Library) -> str:
    digest = hashlib.sha1()
    for experience in library.experiences:
        digest.update(experience.id.encode())
        digest.update(b"\0")
        digest.update(experience.text.encode())
        digest.update(b"\1")
    return digest.hexdigest()


__all__ = ["DEFAULT_COLLECTION", "ExperienceStore", "Match", "library_fingerprint"]
