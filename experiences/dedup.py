"""Near-duplicate control with the vector store.

- `screen_adds`: before applying, an `add` whose nearest existing experience (or an earlier add of the
  same batch) has cosine similarity >= threshold (default 0.90) is taken out and returned as a
  `MergeCandidate` instead of becoming a second copy; the engine's consolidation step can ask the LLM
  to merge it, or drop it.
- `enforce_dedup`: what `tfgrpo learn` does before applying a step (`dedup: enforce`, the default). An add
  that is a near-duplicate (`is_near_duplicate`) of an experience, or of an earlier add of the same batch,
  does not grow the library: it becomes a modify of that neighbour when its text is longer (more specific),
  else it is dropped. A modify that would make its experience a near-duplicate of another becomes a merge
  of the two. Every decision is recorded with both texts and the similarities.
- `find_duplicate_groups`: over a whole library, groups of experiences linked by similarity >= threshold.
- `dedup_library`: those groups, plus merge operations for the members that are one lesson by the same rule
  as enforcement (`is_near_duplicate`), keeping the text of the most valuable member. The word checks
  matter: sentence embeddings barely see an operator, a negation or a swapped term ("..., add 11 and ..."
  / "..., subtract 11 and ...": 0.99; "Use degrees, not radians" / "Use radians, not degrees": 0.992), so
  such pairs are reported as a group for a person to judge, never merged.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

from tfgrpo.experiences.apply import ApplyResult, same_lesson_aliases
from tfgrpo.experiences.contrast import meaning_difference
from tfgrpo.experiences.embedders import Embedder
from tfgrpo.experiences.lexical import lexical_similarity, lexically_similar
from tfgrpo.experiences.limits import (  # re-exported: callers import them from here
    DEFAULT_MERGE_THRESHOLD,
    DEFAULT_THRESHOLD,
    SAME_LESSON_COSINE,
)
from tfgrpo.experiences.model import Library
from tfgrpo.experiences.ops import AddOp, MergeOp, ModifyOp, Operation
from tfgrpo.experiences.store import ExperienceStore, Match
from tfgrpo.experiences.store_process import StoreProcess

#: Enforcement: two lessons are one when the embedding puts them at cosine >= 0.70 and the word-level checks
#: of tfgrpo.experiences.contrast find no difference in meaning (a number, an operator, a negation, a contrast word,
#: a term one side lacks). Chosen on tests/data/lesson_pairs.jsonl (40 paraphrase and 40 different-lesson
#: pairs): 0.70 is the lowest cosine at which no different pair folds; docs/experiences.md#enforced-dedup has
#: the tables, on that set and on held-out pairs from public lesson libraries.
DEFAULT_ENFORCE_THRESHOLD = SAME_LESSON_COSINE


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
    kept_vectors: list[Any] = []
    kept_texts: list[str] = []
    held: dict[int, MergeCandidate] = {}
    for index, (op, vector, matches) in enumerate(zip(adds, _unit_rows(vectors), nearest, strict=False)):
        best: Match | None = matches[0] if matches else None
        for n, (other, other_text) in enumerate(zip(kept_vectors, kept_texts, strict=False)):
            similarity = _dot(vector, other)
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


class DedupDecision(BaseModel):
    """What enforcement did with one operation, and why."""

    action: Literal["merged", "dropped"] = Field(
        description="merged: the operation became a modify / merge of its neighbour; dropped: it was left out."
    )
    operation: dict[str, Any] = Field(description="The proposed operation, in wire format.")
    text: str
    neighbour_id: str = Field(description="Id of the experience, or 'new:<n>' for the n-th add of the batch.")
    neighbour_text: str
    similarity: float = Field(description="Cosine similarity of the two texts.")
    lexical: float = Field(description="Word-sequence ratio of the two texts (see lexical_similarity).")


def is_near_duplicate(a: str, b: str, cosine: float, threshold: float = DEFAULT_ENFORCE_THRESHOLD) -> bool:
    """The same lesson: close in meaning (cosine >= threshold) and no word-level difference in what they say
    (tfgrpo.experiences.contrast: numbers, operators, negation, contrast words, a term one side lacks). The one rule
    of `tfgrpo learn` (dedup: enforce) and `tfgrpo library dedup --merge`."""
    return cosine >= threshold and meaning_difference(a, b) is None


@dataclass
class Folded:
    """What enforcement returns: the operations to apply, its decisions, and the phrasings to remember."""

    operations: list[Operation]
    decisions: list[DedupDecision] = field(default_factory=list)
    # (an experience id, or the kept operation that will create or change the experience; a phrasing of it)
    aliases: list[tuple[str | Operation, str]] = field(default_factory=list)

    def remember_aliases(self, library: Library, applied: ApplyResult) -> None:
        """Record every folded phrasing on the experience it was folded into (in `library`, after apply), so
        a later paraphrase is compared with all the ways the lesson was said, not only its current text."""
        created = {id(item.operation): item.ids[-1] for item in applied.applied if item.ids}
        for target, text in self.aliases:
            experience = library.get(created.get(id(target), "") if not isinstance(target, str) else target)
            if experience is not None and text not in experience.aliases:
                experience.aliases = same_lesson_aliases(experience.text, [*experience.aliases, text])


def enforce_dedup(
    library: Library,
    operations: Iterable[Operation],
    store: ExperienceStore | StoreProcess | Embedder,
    *,
    threshold: float = DEFAULT_ENFORCE_THRESHOLD,
) -> Folded:
    """The operations to apply with near-duplicates folded into their neighbours (see the module doc).

    `store`: the library's vector store; for an empty library a bare embedder is enough."""
    operations = list(operations)
    checked = [op for op in operations if isinstance(op, (AddOp, ModifyOp))]
    if not checked:
        return Folded(operations)
    vectors: Sequence[Sequence[float]]
    matches: list[list[Match]]
    if isinstance(store, ExperienceStore | StoreProcess):
        store.sync(library)
        vectors = store.embed([op.experience for op in checked])
        matches = store.query_vectors(vectors, k=2)
    elif len(library):
        raise ValueError("enforce_dedup needs the library's vector store when the library is not empty")
    else:
        vectors, matches = store.embed([op.experience for op in checked]), [[] for _ in checked]
    known = [(e.id, alias) for e in library for alias in e.aliases]
    texts = {e.id: e.text for e in library}
    alias_vectors = _unit_rows(store.embed([alias for _, alias in known]) if known else [])
    vectors = _unit_rows(vectors)
    folded = Folded([])
    batch: list[tuple[Any, int]] = []  # (vector, position in folded.operations) of kept adds
    nearest = {id(op): (vector, found) for op, vector, found in zip(checked, vectors, matches, strict=True)}
    for op in operations:
        if not isinstance(op, (AddOp, ModifyOp)) or id(op) not in nearest:
            folded.operations.append(op)
            continue
        vector, found = nearest[id(op)]
        candidates: list[tuple[str, str, float, int | None]] = [(m.id, m.text, m.similarity, None) for m in found]
        candidates += [(i, alias, _dot(vector, v), None) for (i, alias), v in zip(known, alias_vectors, strict=True)]
        if isinstance(op, AddOp):  # a modify is checked against the library only
            candidates += [
                (f"new:{n}", _text(folded.operations[p]), _dot(vector, v), p) for n, (v, p) in enumerate(batch)
            ]
        own = op.id if isinstance(op, ModifyOp) else None
        near = [
            c
            for c in candidates
            if c[0] != own and is_near_duplicate(op.experience, c[1], c[2], threshold) and not _stale(c, texts)
        ]
        if not near:
            if isinstance(op, AddOp):
                batch.append((vector, len(folded.operations)))
            folded.operations.append(op)
            continue
        _fold(op, max(near, key=lambda c: c[2]), folded)
    return folded


def _stale(candidate: tuple[str, str, float, int | None], texts: dict[str, str]) -> bool:
    """An alias that no longer says what its experience says (a library from before aliases were checked on
    write): asked only of the few candidates near a proposal, since the check costs ~0.1 ms a pair."""
    experience_id, text = candidate[0], candidate[1]
    current = texts.get(experience_id)
    return current is not None and text != current and meaning_difference(text, current) is not None


def _fold(op: AddOp | ModifyOp, neighbour: tuple[str, str, float, int | None], folded: Folded) -> None:
    """Fold `op` into its neighbour: a longer text (taken as more specific) replaces the neighbour's."""
    neighbour_id, text, cosine, position = neighbour
    current = _text(folded.operations[position]) if position is not None else text
    longer = len(op.experience.split()) > len(current.split())
    if isinstance(op, ModifyOp):
        merged = MergeOp(ids=(op.id, neighbour_id), experience=op.experience if longer else current)
        folded.operations.append(merged)
        folded.aliases += [(merged, op.experience), (merged, current)]
        action = "merged"
    elif position is not None:  # an earlier add of this batch
        target = folded.operations[position]
        if longer:
            target = folded.operations[position] = AddOp(experience=op.experience)
        folded.aliases += [(target, op.experience), (target, current)]
        action = "merged" if longer else "dropped"
    elif longer:
        modify = ModifyOp(id=neighbour_id, experience=op.experience)
        folded.operations.append(modify)
        folded.aliases += [(neighbour_id, op.experience), (neighbour_id, current)]
        action = "merged"
    else:
        folded.aliases.append((neighbour_id, op.experience))
        action = "dropped"
    folded.decisions.append(
        DedupDecision(
            action=action,
            operation=op.to_wire(),
            text=op.experience,
            neighbour_id=neighbour_id,
            neighbour_text=text,
            similarity=round(cosine, 4),
            lexical=round(lexical_similarity(op.experience, text), 4),
        )
    )


def _text(operation: Operation) -> str:
    return getattr(operation, "experience", None) or ""


def _dot(a: Any, b: Any) -> float:
    return float(a @ b)


def _unit_rows(vectors: Sequence[Sequence[float]]) -> Any:
    """The embedders' vectors (unit length already) as numpy rows: the step's pairwise dot products in C, not
    in a Python loop over 384 numbers (~0.3 s a step at 100 adds)."""
    import numpy as np

    return np.asarray(vectors, dtype=np.float64) if len(vectors) else np.zeros((0, 0))


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
) -> DedupReport:
    """Groups of similar experiences at `threshold` (for a person to read), and merges of those that are one
    lesson by `is_near_duplicate` at `merge_threshold`, keeping the text of the most valuable member."""
    groups = find_duplicate_groups(library, store, threshold=threshold)
    merges: list[MergeOp] = []
    for group in find_duplicate_groups(library, store, threshold=merge_threshold):
        members = [e for e in library.experiences if e.id in group.ids]  # group ids are in library order
        keeper = max(members, key=lambda e: (e.usage.success_rate(), len(e.text)))
        vectors = _unit_rows(store.embed([e.text for e in members]))
        kept = vectors[members.index(keeper)]
        same = [
            e.id
            for e, vector in zip(members, vectors, strict=True)
            if e is keeper or is_near_duplicate(e.text, keeper.text, _dot(vector, kept), merge_threshold)
        ]
        if len(same) > 1:
            merges.append(MergeOp(ids=tuple(same), experience=keeper.text))
    return DedupReport(groups=groups, merges=merges)


__all__ = [
    "DEFAULT_ENFORCE_THRESHOLD",
    "SAME_LESSON_COSINE",
    "DEFAULT_MERGE_THRESHOLD",
    "DEFAULT_THRESHOLD",
    "DedupDecision",
    "DedupReport",
    "Folded",
    "DuplicateGroup",
    "MergeCandidate",
    "Screened",
    "dedup_library",
    "enforce_dedup",
    "find_duplicate_groups",
    "is_near_duplicate",
    "lexical_similarity",
    "lexically_similar",
    "screen_adds",
]
