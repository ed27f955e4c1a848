"""The credit statistic (tfgrpo.experiences.credit): the estimate, its interval's coverage on simulated randomized
rollouts, the verdicts, the file round trip, and what apply does with credit and retired texts."""

from __future__ import annotations

import random

import pytest

from tfgrpo.experiences import AddOp, Library, MergeOp, ModifyOp, apply_operations
from tfgrpo.experiences.credit import Credit


def test_the_estimate_is_the_weighted_mean_of_the_per_query_differences():
    credit = Credit()
    credit.add([1, 1, 0], [0])  # d = 2/3 - 0, w = 3*1/4
    credit.add([1], [1, 0])  # d = 1 - 1/2, w = 2/3
    expected = (0.75 * (2 / 3) + (2 / 3) * 0.5) / (0.75 + 2 / 3)
    assert credit.groups == 2 and credit.with_rollouts == 4 and credit.without_rollouts == 3
    assert credit.effect == pytest.approx(expected, abs=1e-6)
    low, high = credit.interval()
    assert low < credit.effect < high
    credit.add([1], [])  # no rollout without it: no evidence
    assert credit.groups == 2


def simulate(effect: float, queries: int, rng: random.Random, leave_out: float = 0.3, group: int = 5) -> Credit:
    """Randomized leave-outs on queries of different difficulty: the reward is 1 with probability base + effect
    when the experience is in the prompt, base without it."""
    credit = Credit()
    for _ in range(queries):
        base = rng.uniform(0.2, 0.6)
        arms: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(group):
            has_it = rng.random() >= leave_out
            arms[has_it].append(float(rng.random() < base + (effect if has_it else 0.0)))
        credit.add(arms[True], arms[False])
    return credit


@pytest.mark.parametrize("effect", [-0.25, 0.0, 0.3])
def test_the_interval_covers_the_true_effect_at_least_at_its_level(effect):
    rng = random.Random(7)
    runs = [simulate(effect, queries=20, rng=rng) for _ in range(300)]
    covered = sum(low <= effect <= high for low, high in (c.interval() for c in runs))
    assert covered / len(runs) >= 0.93  # 95% nominal; the rewards' variance floor makes it conservative


def test_a_neutral_experience_is_rarely_judged_to_hurt_and_a_harmful_one_is_found():
    rng = random.Random(11)
    neutral = [simulate(0.0, queries=20, rng=rng).verdict() for _ in range(300)]
    assert neutral.count("hurts") / len(neutral) <= 0.04
    harmful = [simulate(-0.3, queries=20, rng=rng).verdict() for _ in range(100)]
    assert harmful.count("hurts") >= 60  # power at 20 queries, ~1.5 rollouts without it each: measured 72%
    stronger = [simulate(-0.3, queries=60, rng=rng).verdict() for _ in range(100)]
    assert stronger.count("hurts") >= 95
    assert simulate(-0.3, queries=3, rng=rng).verdict() == "untested"  # too few queries for a verdict


def test_few_agreeing_queries_are_not_taken_for_certainty():
    credit = Credit()
    for with_it, without in [([0, 0], [1, 0]), ([0, 0, 1], [1, 1]), ([0, 0], [1, 0]), ([0, 1, 0], [1, 1])]:
        credit.add(with_it, without)
    low, high = credit.interval()
    # the four differences nearly agree; their spread alone would give an interval a tenth as wide
    assert high - low > 0.8 and credit.verdict() == "unclear"


def test_a_saved_library_carries_effect_and_interval_and_reads_back():
    library = Library.from_texts(["Check the boundary values first."])
    for _ in range(5):
        library.experiences[0].credit.add([1, 1, 0], [0, 0])
    data = library.model_dump(mode="json")["experiences"][0]["credit"]
    assert data["effect"] == pytest.approx(2 / 3, abs=1e-6) and data["low"] is not None and data["high"] is not None
    again = Library.model_validate_json(library.to_json())
    assert again.experiences[0].credit == library.experiences[0].credit


def test_a_changed_text_starts_a_new_credit_and_a_retired_text_is_refused():
    library = Library.from_texts(["Multiply the key by 37.", "Multiply the key by 73.", "Check the digits."])
    for experience in library:
        experience.credit.add([1, 0], [0])
    same = apply_operations(library, [ModifyOp(id="G0", experience="Multiply the key by 37.")]).library
    assert same.get("G0").credit.groups == 1  # unchanged text: the evidence stays
    changed = apply_operations(library, [ModifyOp(id="G0", experience="Multiply the key by 38.")]).library
    assert changed.get("G0").credit.groups == 0  # another lesson now: measured anew
    merged = apply_operations(library, [MergeOp(ids=("G0", "G2"), experience="Check the key.")]).library
    assert merged.get("G3").credit.groups == 0

    harmful = library.get("G1")
    library.experiences.remove(harmful)
    library.retire(harmful, step=4)
    result = apply_operations(
        library,
        [
            AddOp(experience="multiply the key  by 73."),
            ModifyOp(id="G0", experience="Multiply the key by 73."),
            MergeOp(ids=("G0", "G2"), experience="Multiply the key by 73."),
        ],
    )
    assert not result.applied and len(result.rejected) == 3
    assert all("retired at step 4" in r.reason for r in result.rejected)
