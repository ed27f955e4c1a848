"""One chat turn through the client layer (library side of `tfgrpo chat`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from tfgrpo.llm.config import LLMConfig
from tfgrpo.llm.factory import build_client
from tfgrpo.llm.types import Completion, SamplingParams


class ChatConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    llm: LLMConfig = Field(default_factory=LLMConfig)
    sampling: SamplingParams = Field(default_factory=lambda: SamplingParams(temperature=0.0, max_tokens=256))
    system: str | None = Field(None, description="An optional system message.")


def run_chat(config: ChatConfig, prompt: str) -> Completion:
    client = build_client(config.llm)
    messages = ([{"role": "system", "content": config.system}] if config.system else []) + [
        {"role": "user", "content": prompt}
    ]
    try:
        return client.chat_sync(messages, sampling=config.sampling, tag="chat")[0]
    finally:
        client.close_cache()
