"""The sequential test of champion against challenger, on simulated streams whose truth is known.

Continuous peeking: `difference_path` gives the bounds after every observation (the same bounds
`difference_bounds` gives on that prefix), and `decide` is applied to each of them; a stream counts as a
false promotion if any look promotes.
"""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from tfgrpo.core.sequential import (
    Decision,
    Observation,
    SequentialInputError,
    SequentialSettings,
    decide,
    decide_guard,
    difference_bounds,
    difference_path,
    guard_bounds,
    pair_by_prompt,
)


def _stream(rng, n, p_champion, p_challenger, *, paired):
    """n observations per arm, alternating arms in time; paired streams send each prompt to both arms."""
    champion, challenger = [], []
    for t in range(n):
        champion.append(Observation(f"q{t}" if paired else f"a{t}", float(rng.random() < p_champion), 2.0 * t))
        challenger.append(Observation(f"q{t}" if paired else f"b{t}", float(rng.random() < p_challenger), 2.0 * t + 1))
    return champion, challenger


def _first_decision(path, settings):
    for bounds in path:
        decision = decide(bounds, settings)
        if decision.action != "continue":
            return decision, bounds
    return None, path[-1]


@pytest.mark.parametrize("paired", [True, False])
def test_path_ends_where_difference_bounds_does(paired):
    champion, challenger = _stream(np.random.default_rng(3), 120, 0.5, 0.6, paired=paired)
    path = difference_path(champion, challenger, alpha=0.05)
    assert len(path) == 240
    final = difference_bounds(champion, challenger, alpha=0.05)
    assert final.kind == ("paired" if paired else "two-sample") == path[-1].kind
    assert final.lower == pytest.approx(path[-1].lower, abs=1e-9)
    assert final.upper == pytest.approx(path[-1].upper, abs=1e-9)
    prefix = difference_bounds(champion[:50], challenger[:50], alpha=0.05)
    assert prefix.lower == pytest.approx(path[99].lower, abs=1e-9)
    assert path[99].n_champion == path[99].n_challenger == 50
    assert final.lower < final.estimate < final.upper


A_A_STREAMS = 1000
A_A_HORIZON = 100  # per arm: every look from min_samples (20) to 100 is a chance to promote wrongly


@pytest.mark.parametrize("paired", [True, False], ids=["paired", "two-sample"])
def test_a_a_streams_are_falsely_promoted_at_most_alpha_of_the_time(paired):
    rng = np.random.default_rng(2026 + paired)
    settings = SequentialSettings(alpha=0.05, max_samples=A_A_HORIZON)
    promoted = kinds = 0
    for stream in range(A_A_STREAMS):
        base = (0.3, 0.5, 0.8)[stream % 3]
        path = difference_path(*_stream(rng, A_A_HORIZON, base, base, paired=paired), alpha=settings.alpha)
        decision, bounds = _first_decision(path, settings)
        promoted += decision is not None and decision.action == "promote"
        kinds += bounds.kind == ("paired" if paired else "two-sample")
    assert kinds == A_A_STREAMS
    assert promoted / A_A_STREAMS <= settings.alpha, promoted


@pytest.mark.parametrize("paired", [True, False], ids=["paired", "two-sample"])
@pytest.mark.parametrize(("effect", "action"), [(0.10, "promote"), (-0.10, "rollback")])
def test_a_ten_point_challenger_is_promoted_and_a_ten_point_worse_one_rolled_back(paired, effect, action):
    rng = np.random.default_rng(7)
    settings = SequentialSettings()
    for _ in range(5):
        path = difference_path(*_stream(rng, settings.max_samples, 0.5, 0.5 + effect, paired=paired), alpha=0.05)
        decision, bounds = _first_decision(path, settings)
        assert decision is not None and decision.action == action, decision
        assert (bounds.lower > 0) if action == "promote" else (bounds.upper < 0)
        assert bounds.n_test < settings.max_samples


def test_no_decision_before_min_samples_and_a_stop_at_max_samples():
    rng = np.random.default_rng(5)
    settings = SequentialSettings(min_samples=30, max_samples=60)
    path = difference_path(*_stream(rng, 60, 0.0, 1.0, paired=False), alpha=0.05)
    decision, bounds = _first_decision(path, settings)
    assert decision.action == "promote" and bounds.n_test == 30  # all-or-nothing: certain from the first look
    flat = difference_path(*_stream(rng, 60, 1.0, 1.0, paired=True), alpha=0.05)
    assert decide(flat[-2], settings).action == "continue"
    assert decide(flat[-1], settings) == Decision("stop", "n 60 pairs reached max_samples 60: the champion stays")


def test_the_guard_rolls_back_a_challenger_that_fails_more():
    rng = np.random.default_rng(11)
    champion = list(rng.random(400) < 0.02)
    challenger = list(rng.random(400) < 0.15)
    bounds = guard_bounds(champion, challenger, alpha=0.05)
    assert bounds.lower > 0.0
    assert decide_guard(bounds, max_increase=0.02).action == "rollback"
    same = guard_bounds(champion, list(rng.random(400) < 0.02), alpha=0.05)
    assert decide_guard(same, max_increase=0.02).action == "continue"
    always_failing = guard_bounds([False] * 20, [True] * 20, alpha=0.05)
    assert decide_guard(always_failing, max_increase=0.02).action == "rollback"
    assert decide_guard(guard_bounds([False] * 5, [True] * 5, alpha=0.05), 0.02).action == "continue"  # warm-up


def test_pairs_are_one_to_one_in_time_order():
    champion = [Observation("x", 1.0, 1.0), Observation("x", 0.0, 3.0), Observation("y", 1.0, 2.0)]
    challenger = [Observation("x", 0.5, 5.0), Observation("z", 1.0, 0.5), Observation("x", 0.25, 4.0)]
    pairs = pair_by_prompt(champion, challenger)
    assert pairs == [(champion[0], challenger[2]), (champion[1], challenger[0])]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"alpha": 0.0}, "greater than 0"),
        ({"alpha": 1.5}, "less than 1"),
        ({"min_samples": 50, "max_samples": 20}, "min_samples (50) must not exceed max_samples (20)"),
        ({"margin": -0.1}, "greater than or equal to 0"),
    ],
)
def test_bad_settings_are_refused_with_a_clear_message(fields, message):
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        SequentialSettings(**fields)


def test_a_reward_outside_its_range_is_refused():
    with pytest.raises(SequentialInputError, match=r"champion reward 2\.0 .* outside \[0\.0, 1\.0\]"):
        difference_bounds([Observation("q", 2.0, 0.0)], [Observation("q", 1.0, 1.0)], alpha=0.05)
    rescaled = difference_bounds(
        [Observation(f"q{i}", 1.0 + i % 5, float(i)) for i in range(40)],
        [Observation(f"q{i}", 1.0 + (i + 1) % 5, i + 0.5) for i in range(40)],
        alpha=0.05,
        low=1.0,
        high=5.0,
    )
    assert rescaled.kind == "paired" and -4.0 <= rescaled.lower <= rescaled.upper <= 4.0


def test_the_kind_follows_the_pairs_and_the_path_matches_every_prefix():
    """Unpaired traffic first, then prompts that reach both arms: the kind switches to paired once the pairs
    cover half of the smaller arm, and after every observation the path equals a fresh `difference_bounds`."""
    rng = np.random.default_rng(13)
    champion, challenger = [], []
    for t in range(60):
        paired = t >= 20
        champion.append(Observation(f"q{t}" if paired else f"a{t}", float(rng.random() < 0.5), 2.0 * t))
        challenger.append(Observation(f"q{t}" if paired else f"b{t}", float(rng.random() < 0.6), 2.0 * t + 1))
    path = difference_path(champion, challenger, alpha=0.05)
    kinds = [bounds.kind for bounds in path]
    switch = kinds.index("paired")
    assert set(kinds[:switch]) == {"two-sample"} and set(kinds[switch:]) == {"paired"}
    assert path[switch].n_pairs == 20 == path[switch].n_champion / 2  # 20 pairs = half of the 40 per arm
    for k in (5, 39, switch - 1, switch, 100, 119):
        cut = (k + 2) // 2, (k + 1) // 2  # observations per arm after k + 1 events, champion first
        fresh = difference_bounds(champion[: cut[0]], challenger[: cut[1]], alpha=0.05)
        assert (fresh.kind, fresh.n_pairs, fresh.n_champion, fresh.n_challenger) == (
            path[k].kind,
            path[k].n_pairs,
            path[k].n_champion,
            path[k].n_challenger,
        )
        assert fresh.lower == pytest.approx(path[k].lower, abs=1e-9)
        assert fresh.upper == pytest.approx(path[k].upper, abs=1e-9)
