"""`warm_up`: the math verifier's worker processes boot in the background while a run's first requests are
on the wire, only when a reference needs math-verify; a boot that fails is reported by the first real check."""

from __future__ import annotations

import time

import pytest

import rewards.verifier
from rewards import combine, get_reward
from rewards.errors import RewardError
from rewards.math import MathReward
from rewards.verifier import Verifier

pytestmark = pytest.mark.timeout(120)


def wait_for_zygote(verifier: Verifier, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if verifier._zygote is not None and verifier._zygote.alive():
            return True
        time.sleep(0.05)
    return False


def test_symbolic_references_boot_the_workers_in_the_background():
    verifier = Verifier(workers=1, timeout_s=5.0, cache_size=0)
    reward = MathReward(verifier=verifier)
    try:
        started = time.perf_counter()
        reward.warm_up(["13", "x^2 + 1"])
        assert time.perf_counter() - started < 0.1  # returns at once; the interpreter boots on its own thread
        assert wait_for_zygote(verifier)
        checked = time.perf_counter()
        assert verifier.check("x^2+1", "1+x^2").equal  # warm: no cold interpreter to wait for
        assert time.perf_counter() - checked < 0.5
    finally:
        verifier.close()


def test_plain_number_references_start_nothing():
    verifier = Verifier(workers=1, timeout_s=5.0, cache_size=0)
    try:
        MathReward(verifier=verifier).warm_up(["13", "-4", "1/2", "0.25", "\\frac{3}{4}", "\\boxed{7}", None])
        time.sleep(0.3)
        assert verifier._zygote is None
    finally:
        verifier.close()


def test_a_combined_reward_warms_its_components():
    verifier = Verifier(workers=1, timeout_s=5.0, cache_size=0)
    try:
        combine({MathReward(verifier=verifier): 1.0, get_reward("format"): 0.2}).warm_up(["\\sqrt{2}"])
        assert wait_for_zygote(verifier)
    finally:
        verifier.close()


def test_a_failed_background_boot_is_reported_by_the_first_check(monkeypatch):
    """The boot takes every idle slot out of the queue; a failure must put them back, or the next check would
    wait for a worker forever."""

    class BrokenZygote:
        def __init__(self, *args, **kwargs):
            raise RewardError("could not start the math-verify worker process: test")

    monkeypatch.setattr(rewards.verifier, "Zygote", BrokenZygote)
    verifier = Verifier(workers=2, timeout_s=5.0, cache_size=0)
    try:
        MathReward(verifier=verifier).warm_up(["x+1"])
        time.sleep(0.3)
        with pytest.raises(RewardError, match="could not start"):
            verifier.check("x+1", "1+x")
    finally:
        verifier.close()
