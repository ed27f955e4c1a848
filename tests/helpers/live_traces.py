"""Pieces of the `tfgrpo learner` tests: trace rows written by the trace writer, a seeded deployment, and the
learner's settings against a scripted model.

Rows are what `tfgrpo serve` writes (`tfgrpo.serve.exchange` builds the same columns); feedback goes through
`TraceStore.set_feedback`, as `/v1/feedback` does.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

from tests.helpers.learn_world import PROBLEM
from tfgrpo.experiences import Library
from tfgrpo.live.config import LearnerConfig
from tfgrpo.llm.config import LLMConfig
from tfgrpo.serve.deployment import Deployment
from tfgrpo.serve.exchange import prompt_key
from tfgrpo.serve.live_library import Snapshot
from tfgrpo.serve.traces import TraceStore

CHAMPION_LESSON = "Read the whole question before answering."


def champion_library() -> Library:
    return Library.from_texts([CHAMPION_LESSON])


def seed_deployment(traces: Path | str, library: Library | None = None) -> tuple[Deployment, TraceStore]:
    """The deployment `tfgrpo serve` starts on its store: `library` (default: the champion lesson) serving."""
    store = TraceStore(traces)
    deployment = Deployment(store.engine)
    library = library if library is not None else champion_library()
    deployment.start(library, Snapshot.of(library).content_hash, source="file library.json", by="serve")
    return deployment, store


def add_exchange(
    store: TraceStore,
    prompt: str | None = None,
    *,
    reply: str = "Adding gives \\boxed{0}",
    messages: str | None = None,
    truncated: dict[str, int] | None = None,
    created_at: float | None = None,
) -> str:
    """One served exchange as the trace writer stores it; `messages`: the raw column (malformed on purpose)."""
    listed = [{"role": "user", "content": prompt or ""}]
    exchange_id = uuid.uuid4().hex
    store.add(
        {
            "id": exchange_id,
            "created_at": time.time() if created_at is None else created_at,
            "model": "m",
            "upstream": "http://127.0.0.1:9/v1",
            "arm": "B",
            "injected_ids": json.dumps([]),
            "prompt_key": prompt_key(listed),
            "messages": messages if messages is not None else json.dumps(listed),
            "reply": reply,
            "status": 200,
            "stream": False,
            "truncated": json.dumps(truncated) if truncated else None,
        }
    )
    store.flush()
    return exchange_id


def rewarded(store: TraceStore, a: int, b: int, **options: Any) -> str:
    """An exchange of "What is A+B?" rated with its gold answer."""
    exchange_id = add_exchange(store, f"What is {a}+{b}?", **options)
    assert store.set_feedback(exchange_id, reward=0.0, gold=str(a + b))
    return exchange_id


def learner_config(traces: Path | str, out: Path, base_url: str, **settings: Any) -> LearnerConfig:
    """A learner that reads everything at once (no settle time), one pass (`once`), dedup off (CPU)."""
    llm = LLMConfig(backend="openai", model="world-model", base_url=[base_url], api_key="sk-learner-test-key")
    defaults = {"settle_s": 0.0, "once": True, "group_size": 4, "propose_every": 3, "learn": {"dedup": "off"}}
    return LearnerConfig(traces=str(traces), out=str(out), llm=llm, **{**defaults, **settings})


def rollout_requests(bodies: list[dict[str, Any]]) -> list[str]:
    """The "What is A+B?" of each rollout request a scripted server answered (stage requests left out)."""
    prompts = []
    for body in bodies:
        first = body["messages"][0]["content"] or ""
        if any(tag in first for tag in ("<proposed_changes>", "<attempt ", "<trajectory>")):
            continue
        prompts.append(PROBLEM.search(body["messages"][-1]["content"])[0])
    return prompts
