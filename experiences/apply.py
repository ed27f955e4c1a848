"""Apply operations to a library: a new version, with every operation either fully applied or rejected.

Semantics (documented in docs/experiences.md, "Apply semantics"; tested in tests/experiences/test_experiences_apply.py):
- Operations apply in order, each checked against the library as it stands at that point; a rejected
  operation changes nothing. The input library is never mutated.
- `add` gets a fresh id; an add whose text equals an existing experience's (ignoring case and spacing)
  is rejected as a duplicate. Near-duplicates are the vector store's job (`tfgrpo.experiences.dedup`).
- `modify` / `delete` of an unknown id are rejected (never turned into an add). A modify that changes the
  text starts its credit anew, and so does a merge (a credit measures one text); usage counters carry on.
- An add, modify or merge to a retired experience's text (`Library.retired`: measured to hurt) is rejected.
- `merge` needs two or more existing ids; the sources are removed and the merged experience gets a new
  id, `parents` = the source ids, and the sum of their usage counters.
- Texts over `max_words` words (default 32) or empty are rejected, and so (with `require_sentence`, which
  `tfgrpo learn` sets) is a text that does not read as a lesson (`tfgrpo.experiences.model.sentence_problem`: at least two
  words, mostly letters, ending as a sentence ends, not the prompt's placeholder).
- Then the budget: while the library has more than `max_items` experiences or its rendered form more
  than `max_prompt_tokens` tokens, the lowest-value experience is evicted: lowest smoothed success rate
  (correct+1)/(correct+wrong+2), then least recently updated, then oldest. Evictions are returned and
  logged.
- The version goes up by one when anything changed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tfgrpo.experiences.contrast import meaning_difference
from tfgrpo.experiences.credit import Credit
from tfgrpo.experiences.limits import approximate_tokens  # re-exported: callers import it from here
from tfgrpo.experiences.model import MAX_ALIASES, Experience, Library, Provenance, Usage, count_words, sentence_problem
from tfgrpo.experiences.ops import AddOp, DeleteOp, MergeOp, ModifyOp, Operation, Rejection
from tfgrpo.experiences.parse import DEFAULT_MAX_WORDS
from tfgrpo.experiences.render import render

logger = logging.getLogger(__name__)

TokenCounter = Callable[[str], int]


class Budget(BaseModel):
    """Limits on the whole library, enforced after each change set by evicting the lowest-value items."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    max_items: int | None = Field(None, ge=0, description="Most experiences kept (None: no limit).")
    max_prompt_tokens: int | None = Field(
        None, ge=0, description="Most tokens of the rendered library (None: no limit)."
    )


class Applied(BaseModel):
    operation: Operation
    ids: list[str] = Field(
        description="Ids it created or changed (add/modify/merge: the resulting id; delete: the removed id)."
    )


class Eviction(BaseModel):
    experience: Experience
    reason: str


class ApplyResult(BaseModel):
    library: Library
    applied: list[Applied] = Field(default_factory=list)
    rejected: list[Rejection] = Field(default_factory=list)
    evicted: list[Eviction] = Field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.applied or self.evicted)

    def log_records(self) -> list[dict[str, Any]]:
        """One JSON-ready record per applied / rejected / evicted item, for the history's op log."""
        records: list[dict[str, Any]] = []
        for item in self.applied:
            records.append({"kind": "applied", "op": item.operation.to_wire(), "ids": item.ids})
        for rejection in self.rejected:
            records.append({"kind": "rejected", "op": _jsonable(rejection.item), "reason": rejection.reason})
        for eviction in self.evicted:
            records.append(
                {
                    "kind": "evicted",
                    "ids": [eviction.experience.id],
                    "text": eviction.experience.text,
                    "reason": eviction.reason,
                }
            )
        return records


def apply_operations(
    library: Library,
    operations: Iterable[Operation],
    *,
    step: int | None = None,
    provenance: Provenance | dict[str, Any] | None = None,
    max_words: int | None = DEFAULT_MAX_WORDS,
    budget: Budget | None = None,
    count_tokens: TokenCounter = approximate_tokens,
    render_for_budget: Callable[[Library], str] | None = None,
    require_sentence: bool = False,
) -> ApplyResult:
    """Apply `operations` to a copy of `library`; see the module docstring for the rules."""
    base = provenance if isinstance(provenance, Provenance) else Provenance(**(provenance or {}))
    if step is not None and base.step is None:
        base = base.model_copy(update={"step": step})
    new = library.model_copy(deep=True)
    result = ApplyResult(library=new)
    for operation in operations:
        problem = _apply_one(
            new,
            operation,
            step=step,
            provenance=base,
            max_words=max_words,
            result=result,
            require_sentence=require_sentence,
        )
        if problem:
            result.rejected.append(Rejection(reason=problem, item=operation.to_wire()))
    if budget is not None:
        result.evicted = enforce_budget(new, budget, count_tokens=count_tokens, render_for_budget=render_for_budget)
    if result.changed:
        new.version = library.version + 1
        if step is not None:
            new.step = step
    return result


def _apply_one(
    library: Library,
    operation: Operation,
    *,
    step: int | None,
    provenance: Provenance,
    max_words: int | None,
    result: ApplyResult,
    require_sentence: bool = True,
) -> str | None:
    """Apply one operation to `library` in place; returns why it was rejected, or None when applied."""
    text = getattr(operation, "experience", None)
    if text is not None:
        text = " ".join(text.split())
        if not text:
            return "empty experience text"
        if max_words is not None and count_words(text) > max_words:
            return f"text has {count_words(text)} words; the limit is {max_words}"
        if require_sentence and (problem := sentence_problem(text)):
            return problem
    stamp = provenance.model_copy(update={"operation": operation.option})
    if isinstance(operation, AddOp):
        assert text is not None  # add, modify and merge always carry an experience text
        return _add(library, operation, text, step=step, stamp=stamp, result=result)
    if isinstance(operation, (ModifyOp, DeleteOp)):
        return _modify_or_delete(library, operation, text, step=step, stamp=stamp, result=result)
    if isinstance(operation, MergeOp):
        assert text is not None
        return _merge(library, operation, text, step=step, stamp=stamp, result=result)
    return f"unknown operation {operation!r}"


def _add(
    library: Library, operation: AddOp, text: str, *, step: int | None, stamp: Provenance, result: ApplyResult
) -> str | None:
    duplicate = library.find_text(text)
    if duplicate is not None:
        return f"same text as existing {duplicate.id}"
    if (retired := _retired_text(library, text)) is not None:
        return retired
    experience = Experience(
        id=library.allocate_id(), text=text, created_step=step, updated_step=step, provenance=stamp
    )
    library.experiences.append(experience)
    result.applied.append(Applied(operation=operation, ids=[experience.id]))
    return None


def _modify_or_delete(
    library: Library,
    operation: ModifyOp | DeleteOp,
    text: str | None,
    *,
    step: int | None,
    stamp: Provenance,
    result: ApplyResult,
) -> str | None:
    target = library.get(operation.id)
    if target is None:
        return f"unknown id {operation.id!r}"
    if isinstance(operation, DeleteOp):
        library.experiences.remove(target)
    else:
        assert text is not None
        duplicate = library.find_text(text)
        if duplicate is not None and duplicate.id != target.id:
            return f"same text as existing {duplicate.id}"
        if (retired := _retired_text(library, text)) is not None:
            return retired
        if text != target.text:  # a credit measures one text (tfgrpo.experiences.credit); a phrasing says the new one
            target.credit = Credit()
            target.aliases = same_lesson_aliases(text, [*target.aliases, target.text])
        target.text, target.updated_step, target.provenance = text, step, stamp
    result.applied.append(Applied(operation=operation, ids=[operation.id]))
    return None


def _merge(
    library: Library, operation: MergeOp, text: str, *, step: int | None, stamp: Provenance, result: ApplyResult
) -> str | None:
    """Two or more lessons become one new lesson in the first source's place; their usage counts add up."""
    ids = list(dict.fromkeys(operation.ids))
    if len(ids) < 2:
        return "'merge' needs two or more different ids"
    missing = [i for i in ids if i not in library]
    if missing:
        return f"unknown id {missing[0]!r}"
    if (retired := _retired_text(library, text)) is not None:
        return retired
    sources = [e for e in library.experiences if e.id in ids]  # every id is present (checked above)
    usage = Usage(
        in_context=sum(s.usage.in_context for s in sources),
        correct=sum(s.usage.correct for s in sources),
        wrong=sum(s.usage.wrong for s in sources),
    )
    position = min(library.experiences.index(s) for s in sources)
    library.experiences = [e for e in library.experiences if e.id not in ids]
    merged = Experience(
        id=library.allocate_id(),
        text=text,
        created_step=step,
        updated_step=step,
        provenance=stamp,
        parents=ids,
        usage=usage,
        aliases=same_lesson_aliases(text, [alias for s in sources for alias in (*s.aliases, s.text)]),
    )
    library.experiences.insert(position, merged)
    result.applied.append(Applied(operation=operation, ids=[merged.id]))
    return None


def _retired_text(library: Library, text: str) -> str | None:
    retired = library.find_retired(text)
    if retired is None:
        return None
    return f"same text as {retired.id}, retired at step {retired.step} for hurting the reward ({retired.reason})"


def same_lesson_aliases(text: str, phrasings: Iterable[str]) -> list[str]:
    """The phrasings that say what `text` says (tfgrpo.experiences.contrast): an alias of another lesson would make
    dedup drop that lesson when it is proposed again ("37" folded into "73" by a rewrite)."""
    kept = [p for p in dict.fromkeys(phrasings) if p != text and meaning_difference(p, text) is None]
    return kept[-MAX_ALIASES:]


def eviction_order(library: Library) -> list[Experience]:
    """Lowest value first: smoothed success rate, then least recently updated, then oldest."""
    order = {e.id: i for i, e in enumerate(library.experiences)}
    return sorted(
        library.experiences,
        key=lambda e: (e.usage.success_rate(), _step(e.updated_step), _step(e.created_step), order[e.id]),
    )


def enforce_budget(
    library: Library,
    budget: Budget,
    *,
    count_tokens: TokenCounter = approximate_tokens,
    render_for_budget: Callable[[Library], str] | None = None,
) -> list[Eviction]:
    """Evict (in place) until the library fits; returns the evictions, each logged."""
    if render_for_budget is None:
        render_for_budget = render
    evicted: list[Eviction] = []
    candidates = eviction_order(library)
    while candidates:
        reason = _over_budget(library, budget, count_tokens, render_for_budget)
        if reason is None:
            break
        victim = candidates.pop(0)
        library.experiences.remove(victim)
        evicted.append(Eviction(experience=victim, reason=reason))
        logger.info(
            "evicted %s (%s; success rate %.2f): %s", victim.id, reason, victim.usage.success_rate(), victim.text
        )
    return evicted


def _over_budget(
    library: Library, budget: Budget, count_tokens: TokenCounter, render_for_budget: Callable[[Library], str]
) -> str | None:
    if budget.max_items is not None and len(library) > budget.max_items:
        return f"budget: {len(library)} experiences > max_items {budget.max_items}"
    if budget.max_prompt_tokens is not None:
        tokens = count_tokens(render_for_budget(library))
        if tokens > budget.max_prompt_tokens:
            return f"budget: {tokens} prompt tokens > max_prompt_tokens {budget.max_prompt_tokens}"
    return None


def _step(value: int | None) -> int:
    return -1 if value is None else value


def _jsonable(item: Any) -> Any:
    return item.model_dump(mode="json") if isinstance(item, BaseModel) else item


__all__ = [
    "Applied",
    "ApplyResult",
    "Budget",
    "Eviction",
    "apply_operations",
    "approximate_tokens",
    "enforce_budget",
    "eviction_order",
]
