"""The fast path that decides plain numbers; the normalisation itself lives in `tfgrpo.core.answers`
(re-exported here for existing callers).

Everything here is pure Python string work (no sympy), so it runs in the caller's process: integer
answers, by far the most common (GSM8K, AIME), never pay for a round trip to a worker. Only what this
module leaves undecided goes to math-verify.
"""

from __future__ import annotations

from tfgrpo.core.answers import MAX_FAST_DIGITS, as_fraction, canonical_integer, normalize_answer


def fast_equivalent(gold: str, pred: str) -> bool | None:
    """Decide equivalence of two normalised answers without sympy, or None to defer to math-verify.

    Integers compare exactly at any size. Fractions and decimals compare exactly as rationals; only a
    decimal against a non-decimal that differ is deferred, so math-verify's rounding can accept 1/3 = 0.333333.
    """
    if not gold or not pred:
        return None
    if gold == pred:
        return True
    gold_int, pred_int = canonical_integer(gold), canonical_integer(pred)
    if gold_int is not None and pred_int is not None:
        return gold_int == pred_int
    gold_q, pred_q = as_fraction(gold), as_fraction(pred)
    if gold_q is None or pred_q is None:
        return None
    (gold_value, gold_exact), (pred_value, pred_exact) = gold_q, pred_q
    if gold_value == pred_value:
        return True
    if gold_exact and pred_exact:
        return False
    if gold_q[1] == pred_q[1] or gold_int is not None:
        # decimal vs decimal, or an exact integer gold: no rounding leniency (10000 is not 9999.9999999)
        return False
    return None


__all__ = ["MAX_FAST_DIGITS", "as_fraction", "canonical_integer", "fast_equivalent", "normalize_answer"]
