"""Word-level similarity of two lesson texts, on its own so the leakage guard's provenance check can use it
without loading the vector store's modules (learn's path to its first request, docs/performance.md)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence


def lexical_similarity(a: str, b: str) -> float:
    """difflib ratio over lower-cased words without punctuation: order-aware, so swaps and negations count."""
    return difflib.SequenceMatcher(a=words(a), b=words(b), autojunk=False).ratio()


def lexically_similar(a: str, b: str, threshold: float) -> bool:
    """`lexical_similarity(a, b) >= threshold`, with difflib's cheap upper bounds of the ratio tried first: most
    pairs of different lessons fail them, so comparing a step's lessons with its 100 groups' proposals takes
    milliseconds, not the ~0.3 s the full ratio of every pair took."""
    matcher = difflib.SequenceMatcher(a=words(a), b=words(b), autojunk=False)
    return (
        matcher.real_quick_ratio() >= threshold and matcher.quick_ratio() >= threshold and matcher.ratio() >= threshold
    )


def similar_pairs(texts: Sequence[str], others: Sequence[str], threshold: float) -> list[list[int]]:
    """For each of `texts`, the indices of `others` it is `lexically_similar` to: each text's words are
    split once and each other's word index is built once (difflib's `set_seq2`, for one sequence compared
    with many), where pairwise calls redo both for every pair."""
    split = [words(text) for text in texts]
    similar: list[list[int]] = [[] for _ in texts]
    matcher = difflib.SequenceMatcher(autojunk=False)
    for index, other in enumerate(others):
        matcher.set_seq2(words(other))
        for position, text_words in enumerate(split):
            matcher.set_seq1(text_words)
            if (
                matcher.real_quick_ratio() >= threshold
                and matcher.quick_ratio() >= threshold
                and matcher.ratio() >= threshold
            ):
                similar[position].append(index)
    return similar


def words(text: str) -> list[str]:
    """Lower-cased words without punctuation (apostrophes kept), the units both similarities compare."""
    return re.findall(r"[\w']+", text.casefold())
