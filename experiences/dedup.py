"""Near-duplicate control with the vector store.

- `screen_adds`: before applying, an `add` whose nearest existing experience (or an earlier add of the
  same batch) has cosine similarity >= threshold (default 0.90) is taken out and returned as a
  `MergeCandidate` instead of becoming a second copy; the engine's consolidation step can ask the LLM
  to merge it, or drop it.
- `find_duplicate_groups`: over a whole library, groups of experiences linked by similarity >= threshold.
- `dedup_library`: those groups, plus merge operations for near-exact duplicates that can be applied
  directly: cosine >= `merge_threshold` (default 0.95) AND nearly the same words in the same order
  (difflib ratio >= 0.9), keeping the text of the most valuable member. The word check matters:
  sentence embeddings barely see negation or swapped terms ("Use degrees, not radians" vs "Use
  radians, not degrees": cosine 0.992; "Check the domain ..." vs "Do not check the domain ...": 0.97),
  so such pairs are reported as a group for the LLM or a person to judge, never merged blindly.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, Field

from experiences.model import Library
from experiences.ops import AddOp, MergeOp, Operation
from experiences.store import ExperienceStore, Match

DEFAULT_THRESHOLD = 0.90
DEFAULT_MERGE_THRESHOLD = 0.95
DEFAULT_LEXICAL_THRESHOLD = 0.9


class MergeCandidate(BaseModel):
    """An add held back because it is too close to something already there."""

    operation: AddOp
    similar_to: str = Field(
        description="Id of the existing experience, or 'new:<n>' for the n-th kept add of the batch."
    )
    similar_text: str
    similarity: float

    def describe(self) -> str:
        return (
            f"{self.operation.experience!r} ~ [{self.similar_to}] {self.similar_text!r} (cosine {self.similarity:.3f})"
        )


class Screened(BaseModel):
    operations: list[Operation] = Field(description="The operations to apply (near-duplicate adds removed).")
    candidates: list[MergeCandidate] = Field(default_factory=list)


class DuplicateGroup(BaseModel):
    ids: list[str]
    similarity: float = Field(description="Lowest similarity among the links that formed the group.")


class DedupReport(BaseModel):
    groups: list[DuplicateGroup] = Field(default_factory=list)
    merges: list[MergeOp] = Field(
        default_factory=list, description="Merges of near-exact groups, ready for apply_operations."
    )


def screen_adds(
    library: Library, operations: Iterable[Operation], store: ExperienceStore, *, threshold: float = DEFAULT_THRESHOLD
) -> Screened:
    operations = list(operations)
    adds = [op for op in operations if isinstance(op, AddOp)]
    if not adds:
        return Screened(operations=operations)
    store.sync(library)
    vectors = store.embed([op.experience for op in adds])
    nearest = store.query_vectors(vectors, k=1)
    kept_vectors: list[Sequence[float]] = []
    kept_texts: list[str] = []
    held: dict[int, MergeCandidate] = {}
    for index, (op, vector, matches) in enumerate(zip(adds, vectors, nearest, strict=False)):
        best: Match | None = matches[0] if matches else None
        for n, (other, other_text) in enumerate(zip(kept_vectors, kept_texts, strict=False)):
            similarity = sum(a * b for a, b in zip(vector, other, strict=False))
            if best is None or similarity > best.similarity:
                best = Match(id=f"new:{n}", text=other_text, similarity=similarity)
        if best is not None and best.similarity >= threshold:
            held[index] = MergeCandidate(
                operation=op, similar_to=best.id, similar_text=best.text, similarity=best.similarity
            )
        else:
            kept_vectors.append(vector)
            kept_texts.append(op.experience)
    held_ops = {id(adds[i]) for i in held}
    return Screened(operations=[op for op in operations if id(op) not in held_ops], candidates=list(held.values()))


def find_duplicate_groups(
    library: Library, store: ExperienceStore, *, threshold: float = DEFAULT_THRESHOLD, k: int = 5
) -> list[DuplicateGroup]:
    """Connected groups of experiences whose similarity links are >= threshold (each to its k nearest)."""
    store.sync(library)
    parent = {e.id: e.id for e in library.experiences}
    weakest: dict[str, float] = {}

    def root(node: str) -> str:
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    links = []
    for own, matches in store.neighbours_of_all(k=k).items():
        for match in matches:
            if match.similarity >= threshold and own in parent and match.id in parent:
                links.append((own, match.id, match.similarity))
    for a, b, _similarity in links:
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[rb] = ra
    for a, _, similarity in links:
        r = root(a)
        weakest[r] = min(weakest.get(r, 1.0), similarity)
    members: dict[str, list[str]] = {}
    for experience in library.experiences:  # library order inside each group
        members.setdefault(root(experience.id), []).append(experience.id)
    return [DuplicateGroup(ids=ids, similarity=round(weakest[r], 6)) for r, ids in members.items() if len(ids) > 1]


def dedup_library(
    library: Library,
    store: ExperienceStore,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    merge_threshold: float = DEFAULT_MERGE_THRESHOLD,
    lexical_threshold: float = DEFAULT_LEXICAL_THRESHOLD,
) -> DedupReport:
    """Duplicate groups at `threshold`, plus direct merges of near-exact duplicates (see the module docstring)."""
    groups = find_duplicate_groups(library, store, threshold=threshold)
    merges: list[MergeOp] = []
    for group in find_duplicate_groups(library, store, threshold=merge_threshold):
        members = [e for e in library.experiences if e.id in group.ids]  # group ids are in library order
        keeper = max(members, key=lambda e: (e.usage.success_rate(), len(e.text)))
        same = [e.id for e in members if e is keeper or lexical_similarity(e.text, keeper.text) >= lexical_threshold]
        if len(same) > 1:
            merges.append(MergeOp(ids=tuple(same), experience=keeper.text))
    return DedupReport(groups=groups, merges=merges)


def lexical_similarity(a: str, b: str) -> float:
    """difflib ratio over lower-cased words without punctuation: order-aware, so swaps and negations count."""
    import difflib

    return difflib.SequenceMatcher(a=_words(a), b=_words(b), autojunk=False).ratio()


def _words(text: str) -> list[str]:
    return re.findall(r"[\w']+", text.casefold())


__all__ = [
    "DEFAULT_LEXICAL_THRESHOLD",
    "DEFAULT_MERGE_THRESHOLD",
    "DEFAULT_THRESHOLD",
    "DedupReport",
    "DuplicateGroup",
    "MergeCandidate",
    "Screened",
    "dedup_library",
    "find_duplicate_groups",
    "lexical_similarity",
    "screen_adds",
]
