"""Plain data types of the LLM layer: what a request is and what comes back."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["system", "user", "assistant", "tool"]


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Role
    content: str | None = ""
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class SamplingParams(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    temperature: float = Field(0.7, ge=0.0, le=5.0, description="Sampling temperature; 0 = greedy.")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    max_tokens: int = Field(512, ge=1, description="Maximum new tokens per completion.")
    stop: list[str] | None = Field(None, description="Stop strings.")
    seed: int | None = Field(None, description="Sampling seed, where the backend supports one.")


class ResponseSchema(BaseModel):
    """A JSON schema the reply must follow (structured outputs); `name` labels it for APIs that want one."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    name: str = Field(description="Identifier of the reply type (letters, digits, _ and -).")
    schema_: dict[str, Any] = Field(alias="schema", description="The JSON schema of the reply.")

    @property
    def json_schema(self) -> dict[str, Any]:
        return self.schema_


class ChatRequest(BaseModel):
    """One chat call that may ask for `n` samples.

    `sample_offset` names the first sample index: the cache stores every sample under its own key
    (request + index), so the G samples of one group stay distinct and a partial group is reused.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    messages: list[Message]
    n: int = Field(1, ge=1)
    sampling: SamplingParams = Field(default_factory=SamplingParams)
    tools: list[dict[str, Any]] | None = None
    sample_offset: int = 0
    tag: str = Field("", description="Accounting label: rollout, summary, group, consolidate, eval, judge, chat.")
    response_schema: ResponseSchema | None = Field(None, description="Structured output asked of the backend, if any.")

    def sample_key(self, model: str, index: int) -> str:
        """Cache key of sample `index`: sha256 over the request as sorted JSON (no key, no URL, no tag)."""
        payload = {
            "model": model,
            "messages": [m.to_wire() for m in self.messages],
            "sampling": self.sampling.model_dump(),
            "tools": self.tools,
            "index": index,
        }
        if self.response_schema is not None:  # absent otherwise: keys of unstructured requests stay as they were
            payload["response_schema"] = self.response_schema.model_dump(by_alias=True)
        blob = json.dumps(payload, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: the part of `prompt_tokens` the provider served from its prompt cache (billed at the cached rate)
    cached_prompt_tokens: int = 0
    #: the part of `completion_tokens` spent thinking (reasoning models; billed as output tokens)
    reasoning_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class Completion(BaseModel):
    """One sample. `usage` is this sample's share of tokens; a cache hit keeps it, with `cached=True` and zero cost."""

    model_config = ConfigDict(extra="allow")

    text: str
    #: the model's reasoning, kept apart from `text` (the answer): see tfgrpo.llm.reasoning
    reasoning: str | None = None
    finish_reason: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float = 0.0
    latency_s: float = 0.0
    cached: bool = False
    index: int = 0
    schema_enforced: bool = Field(
        False, description="The backend generated this reply under the request's JSON schema."
    )
