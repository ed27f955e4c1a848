"""Cold starts (the math verifier's processes, the vector store) in the network wait of a wave of requests.

A wave's requests leave over several turns of the event loop (the client builds each request, opens its
connection, then writes it), and a cold start that begins before they have all left takes the CPU (or the
GIL) from them: on the first wave of `tfgrpo learn` a fixed 20 ms delay fired before the first connection
was opened and delayed every request by the store's ~30 ms import. So a cold start waits until the loop is
idle, which is when every request is on the wire and the replies are still a network latency away.
One known exception: the SDK's very first requests wait on a thread (its platform detection, ~15-20 ms)
with the loop idle, and on a loaded host the cold starts can begin then, before the first connection; they
still run in the first wave's wait, only a little early (seen in CI with tests/cli/test_startup_collector.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from tfgrpo.core.collector import resume_after_startup

#: The loop counts as idle when a timer of IDLE_CHECK_S fires at most IDLE_LATENESS_S late: no callback
#: (no request being built or written, no reply being read) held it up in between.
IDLE_CHECK_S = 0.004
IDLE_LATENESS_S = 0.001
#: A loop that never goes idle (replies already arriving, a very short latency) still gets its cold starts,
#: this long after the wave began: they are needed later in the run either way.
IDLE_WAIT_LIMIT_S = 0.25


class WhenIdle:
    """Calls `callback(*args)` on the running loop once it is idle (or IDLE_WAIT_LIMIT_S from now)."""

    def __init__(self, callback: Callable[..., Any], *args: Any) -> None:
        self._loop = asyncio.get_running_loop()
        self._callback, self._args = callback, args
        self._give_up_at = self._loop.time() + IDLE_WAIT_LIMIT_S
        self._check_later()

    def _check_later(self) -> None:
        self._due = self._loop.time() + IDLE_CHECK_S
        self._handle = self._loop.call_at(self._due, self._check)

    def _check(self) -> None:
        now = self._loop.time()
        if now - self._due <= IDLE_LATENESS_S or now >= self._give_up_at:
            self._callback(*self._args)
        else:
            self._check_later()

    def cancel(self) -> None:
        self._handle.cancel()


@contextlib.contextmanager
def warming_up(reward: Any, golds: list[Any], *also: Callable[[], Any]) -> Iterator[None]:
    """Within the block, `reward.warm_up(golds)` (rewards may be plain callables: the hook is optional) and
    then each of `also` run once the wave being started is on the wire; what has not run when the block ends
    is dropped. A warm-up is best effort: one that fails is silent here, and the real use retries it and
    reports. The garbage collector, if the CLI paused it for start-up, is resumed first, or when the block ends
    (tfgrpo.core.collector)."""
    warm_up = getattr(reward, "warm_up", None)
    callbacks = [resume_after_startup, *([lambda: warm_up(golds)] if callable(warm_up) else []), *also]
    waiting = WhenIdle(_each_quietly, callbacks)
    try:
        yield
    finally:
        waiting.cancel()
        resume_after_startup()  # a wave over before the loop was ever idle (a fast server) ends start-up too


def _each_quietly(callbacks: list[Callable[[], Any]]) -> None:
    for callback in callbacks:
        with contextlib.suppress(Exception):
            callback()
