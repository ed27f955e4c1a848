"""What `tfgrpo mcp`'s tools do, apart from the protocol: retrieve, list, and record an outcome.

Retrieval is the top-k index `serve` keeps (`topk_index.py`): the library's lessons embedded at start and
at every reload, a task description embedded once per call. An outcome is stored as an exchange of the
trace store `serve` writes (`traces.py`): the task as the user message, the experience ids as what was
injected, the reward (and the gold answer, if the client knows it) as its feedback. So
`tfgrpo learn --from-traces` learns from agent sessions as it does from served traffic: with ground truth
an outcome needs its gold answer, without (`--no-ground-truth`) every task is used. Every input is bounded
(`McpConfig`), and a refusal is an `InputRefused` whose message the client's model reads.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any

from tfgrpo.experiences import Experience
from tfgrpo.serve.arms import LIBRARY
from tfgrpo.serve.exchange import prompt_key
from tfgrpo.serve.live_library import LiveLibrary
from tfgrpo.serve.mcp_config import McpConfig
from tfgrpo.serve.traces import TraceStore

#: the `injection` a recorded outcome carries in the trace store: where it came from
MCP_INJECTION = "mcp"


class InputRefused(ValueError):
    """A tool input out of bounds; the message says which bound and how to fix it."""


def described(experience: Experience) -> dict[str, Any]:
    """An experience as a client sees it: id, text and its measured credit (effect, interval, verdict)."""
    return {"id": experience.id, "text": experience.text, "credit": experience.credit.summary()}


class LibraryTools:
    def __init__(self, config: McpConfig, live: LiveLibrary, traces: TraceStore | None = None):
        self.config = config
        self.live = live
        self.traces = traces

    def relevant(self, task: str, k: int | None) -> dict[str, Any]:
        """The `k` experiences nearest to `task`, in library order, with the library version they come from."""
        self._check_text("task", task, required=True)
        k = self.config.default_k if k is None else k
        if not 1 <= k <= self.config.max_k:
            raise InputRefused(f"k must be between 1 and {self.config.max_k}, not {k}")
        snapshot = self.live.current
        library = snapshot.library
        if k >= len(library):
            chosen = list(library.experiences)
        else:
            assert self.live.index is not None  # built at start: LiveLibrary(topk_index=True)
            chosen = self.live.index.nearest(library, snapshot.positions, task, k)
        return {
            "library_version": snapshot.version,
            "library_hash": snapshot.content_hash,
            "experiences": [described(e) for e in chosen],
        }

    def listing(self) -> dict[str, Any]:
        snapshot = self.live.current
        return {
            "library_version": snapshot.version,
            "library_hash": snapshot.content_hash,
            "task": snapshot.library.task,
            "model": snapshot.library.model,
            "experiences": [described(e) for e in snapshot.library],
        }

    def queue_outcome(
        self,
        task: str,
        experience_ids: list[str],
        reward: float,
        *,
        answer: str | None,
        gold: str | None,
        owner: str | None,
    ) -> dict[str, Any]:
        """Check one outcome and queue its exchange row in the trace store (call it on the event loop, the store's
        one adding thread); `record_feedback` then stores its reward. The row is returned."""
        if self.traces is None:
            raise InputRefused("this server keeps no trace store (start it with --traces)")
        self._check_text("task", task, required=True)
        self._check_text("answer", answer)
        self._check_text("gold", gold)
        if len(experience_ids) > self.config.max_k:
            raise InputRefused(f"experience_ids holds {len(experience_ids)} ids; at most {self.config.max_k}")
        if not math.isfinite(reward) or not self.config.reward_min <= reward <= self.config.reward_max:
            raise InputRefused(
                f"reward must be between {self.config.reward_min:g} and {self.config.reward_max:g}, not {reward}"
            )
        snapshot = self.live.current
        unknown = [id_ for id_ in experience_ids if id_ not in snapshot.positions]
        if unknown:
            shown = ", ".join(repr(id_[:40]) for id_ in unknown[:5])
            raise InputRefused(f"not in the library (version {snapshot.version}): {shown}")
        messages = [{"role": "user", "content": task}]
        row = {
            "id": os.urandom(16).hex(),
            "created_at": time.time(),
            "model": None,
            "upstream": None,
            "arm": LIBRARY,
            "owner": owner,
            "library_version": snapshot.version,
            "library_hash": snapshot.content_hash,
            "injection": MCP_INJECTION,
            "injected_ids": json.dumps(list(dict.fromkeys(experience_ids))),
            "prompt_key": prompt_key(messages),
            "messages": json.dumps(messages, ensure_ascii=False),
            "reply": answer,
            "replies": None,
            "status": 200,
            "error": None,
            "stream": False,
            "latency_ms": None,
            "prompt_tokens": None,
            "completion_tokens": None,
            "truncated": None,
        }
        self.traces.add(row)
        return row

    def record_feedback(self, row: dict[str, Any], reward: float, gold: str | None) -> dict[str, Any]:
        """Store the reward of a queued outcome (blocking database I/O: call it off the event loop)."""
        assert self.traces is not None  # queue_outcome refused the outcome otherwise
        if not self.traces.set_feedback(row["id"], reward=reward, gold=gold, rated_by=row["owner"]):
            raise InputRefused("the trace store did not take the outcome (see the server's log)")
        return {"exchange_id": row["id"], "library_version": row["library_version"], "has_gold": gold is not None}

    def _check_text(self, name: str, value: str | None, *, required: bool = False) -> None:
        if value is None:
            if required:
                raise InputRefused(f"{name} is required")
            return
        if required and not value.strip():
            raise InputRefused(f"{name} must not be empty")
        if len(value) > self.config.max_task_chars:
            raise InputRefused(f"{name} is {len(value):,} characters; at most {self.config.max_task_chars:,}")
