"""Cold starts wait until a wave's requests have all left: the event loop idle, the replies still to come."""

from __future__ import annotations

import asyncio
import time

from rewards import get_reward
from tfgrpo.llm.backends.scripted import ScriptedBackend
from tfgrpo.llm.config import LLMConfig
from tfgrpo.llm.factory import build_client
from tfgrpo.llm.types import SamplingParams
from tfgrpo.rollout import warmup
from tfgrpo.rollout.warmup import WhenIdle, warming_up

SEND_TURNS = 4  # event-loop turns a request takes to leave (build, connect, write, ...)
SEND_CPU_S = 0.001  # client CPU per turn and request


class SlowToSend(ScriptedBackend):
    """Each request takes client CPU over several turns of the loop before it is on the wire, as a real
    HTTP client's does (build the request, open the connection, write it); then the network latency."""

    def __init__(self, latency_s: float) -> None:
        super().__init__(lambda request, index: "so \\boxed{1}", latency_s=latency_s)
        self.on_the_wire = 0
        self.replied = 0

    async def forward(self, request):
        for _ in range(SEND_TURNS):
            time.sleep(SEND_CPU_S)  # noqa: ASYNC251  (the point: CPU that holds the loop, like building a request)
            await asyncio.sleep(0)
        self.on_the_wire += 1
        completions = await super().forward(request)
        self.replied += 1
        return completions


def test_the_warm_up_runs_once_every_request_of_the_wave_is_on_the_wire_and_before_any_reply(monkeypatch):
    """12 requests x 4 turns x 1 ms: the wave leaves over ~50 ms of loop turns, longer than the fixed 20 ms
    the warm-ups used to wait (which fired while most requests were still being sent)."""
    monkeypatch.setattr(warmup, "IDLE_WAIT_LIMIT_S", 10.0)  # this test is about idleness, not the limit
    backend, seen = SlowToSend(latency_s=0.3), []

    class Recording(type(get_reward("math"))):
        def warm_up(self, golds):
            seen.append(("reward", backend.on_the_wire, backend.replied))

    async def wave() -> None:
        client = build_client(LLMConfig(max_retries=0), backends=[backend], cache_path=None)
        also = lambda: seen.append(("store", backend.on_the_wire, backend.replied))  # noqa: E731
        with warming_up(Recording(), ["1"], also):
            await asyncio.gather(
                *(client.chat([{"role": "user", "content": f"q{i}"}], sampling=SamplingParams()) for i in range(12))
            )

    asyncio.run(wave())
    assert seen == [("reward", 12, 0), ("store", 12, 0)]


def test_a_loop_that_never_goes_idle_still_gets_its_warm_up(monkeypatch):
    """Replies already streaming in (a very short latency) keep the loop busy; the cold start still runs,
    IDLE_WAIT_LIMIT_S after the wave began, while the loop is still busy."""
    monkeypatch.setattr(warmup, "IDLE_WAIT_LIMIT_S", 0.05)
    fired_while_busy = []

    async def busy_and_waiting() -> None:
        busy_until = asyncio.get_running_loop().time() + 4 * warmup.IDLE_WAIT_LIMIT_S
        WhenIdle(lambda: fired_while_busy.append(asyncio.get_running_loop().time() < busy_until))
        while asyncio.get_running_loop().time() < busy_until:
            time.sleep(warmup.IDLE_CHECK_S)  # noqa: ASYNC251  (a loop that is never idle)
            await asyncio.sleep(0)

    asyncio.run(busy_and_waiting())
    assert fired_while_busy == [True]


def test_a_warm_up_that_has_not_run_when_the_block_ends_is_dropped():
    ran = []

    async def short_block() -> None:
        with warming_up(get_reward("math"), ["1"], lambda: ran.append("store")):
            pass  # ends before the first idle check
        await asyncio.sleep(2 * warmup.IDLE_WAIT_LIMIT_S)

    asyncio.run(short_block())
    assert ran == []
