"""The shared math-verify pool outlives the thread that started it (asyncio.to_thread threads come and go:
every `asyncio.run` ends its executor's threads, and one process may run several evals)."""

from __future__ import annotations

import threading
import time

import pytest

from tfgrpo.rewards.verifier import Verifier

pytestmark = pytest.mark.timeout(120)


def test_the_pool_survives_the_thread_that_started_it():
    verifier = Verifier(workers=1, timeout_s=5.0, cache_size=0)
    try:
        results = []
        starter = threading.Thread(target=lambda: results.append(verifier.check("1/2", "0.5")))
        starter.start()
        starter.join()
        assert results[0].equal
        time.sleep(0.5)  # a parent-death signal tied to the exited thread would have killed the zygote by now
        assert verifier._zygote is not None and verifier._zygote.alive()
        assert verifier.check("2", "2.0").equal and verifier.check("3", "4").equal is False
    finally:
        verifier.close()
