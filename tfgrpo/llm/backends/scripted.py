"""A real `Backend` whose replies come from a Python function: for tests, benchmarks and dry runs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from tfgrpo.llm.base import Backend
from tfgrpo.llm.types import ChatRequest, Completion, Usage

Responder = Callable[[ChatRequest, int], "str | Completion | BaseException"]


class ScriptedBackend(Backend):
    """`respond(request, sample_index)` returns the reply text, a Completion, or an exception to raise.

    Token counts are whitespace-split word counts, so accounting can be asserted exactly.
    """

    supports_tools = True

    def __init__(
        self, respond: Responder, *, model_name: str = "scripted", endpoint: str = "scripted", latency_s: float = 0.0
    ):
        self.respond = respond
        self.model_name = model_name
        self.endpoint = endpoint
        self.latency_s = latency_s
        self.calls: list[ChatRequest] = []

    async def forward(self, request: ChatRequest) -> list[Completion]:
        self.calls.append(request)
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        prompt_tokens = sum(len((m.content or "").split()) for m in request.messages)
        out: list[Completion] = []
        for i in range(request.sample_offset, request.sample_offset + request.n):
            reply = self.respond(request, i)
            if isinstance(reply, BaseException):
                raise reply
            if isinstance(reply, Completion):
                out.append(reply)
                continue
            usage = Usage(
                prompt_tokens=prompt_tokens if i == request.sample_offset else 0, completion_tokens=len(reply.split())
            )
            out.append(Completion(text=reply, finish_reason="stop", usage=usage, index=i))
        return out

    @property
    def num_samples_served(self) -> int:
        return sum(r.n for r in self.calls)
