"""Rewards wired to the client layer: the LLM-judge reward gets a `complete` callable over `LLMClient`.

`rewards/` knows nothing of our client; a judge receives a plain sync `complete(messages) -> str`.
Scoring runs in a worker thread (`asyncio.to_thread`), so `complete` hands each call to the event
loop that owns the client and waits: judge calls are cached, retried, bounded and accounted like any
other call, under the tag `judge`. Each call carries the verdict's JSON schema (`tfgrpo.rewards.verdict`,
enforced where the backend can), and every verdict's outcome (enforced, parsed, repaired, retried, lost)
is added to the client's accounting (`structured_replies.judge` in the usage snapshot of metrics.json).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache, partial
from typing import Any

from tfgrpo.llm.client import LLMClient
from tfgrpo.llm.types import ResponseSchema, SamplingParams
from tfgrpo.rewards import get_reward
from tfgrpo.rewards.errors import RewardError

JUDGE_SAMPLING = SamplingParams(temperature=0.0, max_tokens=512)


@lru_cache(maxsize=1)
def judge_schema() -> ResponseSchema:
    """The verdict schema the judge's replies are held to (rewards.verdict, loaded with the judge only)."""
    from tfgrpo.rewards.verdict import VERDICT_SCHEMA_NAME, verdict_schema

    return ResponseSchema(name=VERDICT_SCHEMA_NAME, schema=verdict_schema())


def judge_completer(client: LLMClient, loop: asyncio.AbstractEventLoop):  # -> rewards.judge.Complete
    """The judge's sync `complete(messages)` over `client`: greedy, under the verdict schema, tag `judge`."""
    return client.completer(loop, sampling=JUDGE_SAMPLING, tag="judge", response_schema=judge_schema())


def build_reward(
    name: str, client: LLMClient | None = None, *, loop: asyncio.AbstractEventLoop | None = None, **params: Any
):
    """`tfgrpo.rewards.get_reward(name, **params)`, with the judge's `complete` made from `client` on `loop`
    (default: the running loop; call this from inside it)."""
    if name == "judge" and "complete" not in params:
        if client is None:
            raise RewardError("the judge reward needs an LLM client (configure the llm: section)")
        params["complete"] = judge_completer(client, loop or asyncio.get_running_loop())
        params.setdefault("on_reply", partial(client.accounting.record_replies, "judge"))
    return get_reward(name, **params)


def daemon_loop() -> tuple[asyncio.AbstractEventLoop, threading.Thread]:
    """An event loop running in a daemon thread (a one-shot command may simply let it die with the process)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="tfgrpo-judge-loop", daemon=True)
    thread.start()
    return loop, thread


@contextmanager
def background_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop in a thread for synchronous callers of async clients; stopped on exit."""
    loop, thread = daemon_loop()
    try:
        yield loop
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        loop.close()
