"""The tool interface: what a model may call during a multi-turn rollout.

A tool has a name, a description and a JSON-schema of its arguments (exactly what OpenAI-style native
tool calling sends to the model), and one coroutine, `run(arguments) -> ToolResult`. A tool never
raises for a failure the model caused (bad code, bad arguments, a timeout): it returns a `ToolResult`
with `error` set, so the model sees the failure and the trajectory goes on. It raises `ToolError`
only for a misconfiguration the user must fix (a missing API key, an unknown tool name).

Tools that keep state across the calls of one trajectory (a Python interpreter whose variables survive
from one call to the next) override `session()`: the agent opens one session per trajectory and closes
it at the end, so concurrent trajectories never share state.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import AsyncIterator
from typing import Any, ClassVar

from pydantic import BaseModel, Field


class ToolError(ValueError):
    """A tool cannot be built or used as configured; the message says what to fix."""


class ToolResult(BaseModel):
    """What one call returned. `error` is set when the call failed (the model sees it)."""

    output: str = Field("", description="What the tool printed or returned (possibly truncated).")
    error: str | None = Field(None, description="Why the call failed, for the model to read; None on success.")
    elapsed_s: float = Field(0.0, description="Wall time of the call in seconds.")
    truncated: bool = Field(False, description="Whether `output` was cut to the tool's size limit.")

    @property
    def ok(self) -> bool:
        return self.error is None

    def as_observation(self) -> str:
        """The text the model reads back: output, then the error (if any)."""
        parts = []
        if self.output:
            parts.append(self.output.rstrip("\n"))
        if self.truncated:
            parts.append("[output truncated]")
        if self.error:
            parts.append(f"Error: {self.error}")
        return "\n".join(parts) if parts else "(no output)"


class Tool(abc.ABC):
    """Subclass, set `name`, `description` and `parameters`, implement `run`."""

    #: the function name the model calls (letters, digits, _ and -)
    name: ClassVar[str]
    #: one or two sentences the model reads to decide when to call the tool
    description: ClassVar[str]
    #: JSON schema of the `arguments` object
    parameters: ClassVar[dict[str, Any]]

    @abc.abstractmethod
    async def run(self, arguments: dict[str, Any]) -> ToolResult:
        """Execute one call. Return errors the model caused as `ToolResult(error=...)`."""

    def openai_schema(self) -> dict[str, Any]:
        """The entry of an OpenAI `tools=[...]` list for native tool calling."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[Tool]:
        """A tool for one trajectory. Stateless tools are their own session; stateful ones override."""
        yield self

    def missing_arguments(self, arguments: dict[str, Any]) -> list[str]:
        """Required arguments (per the schema) absent from a call."""
        required = self.parameters.get("required", [])
        return [key for key in required if key not in arguments]
