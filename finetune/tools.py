"""Our tools (`tfgrpo.rollout.tools`: the sandboxed `python` interpreter, `web_search`, users' own) as tools of TRL's
`GRPOTrainer`, for multi-turn GRPO / GSPO rollouts.

How TRL 1.16 runs tools (`trl/trainer/grpo_trainer.py`): after the first generation it parses each
completion with the tokenizer's response template (`<tool_call>{...}</tool_call>` for Qwen-style
templates), calls the named tool with the parsed arguments, appends a `role: tool` message, renders
only the new tokens with the chat template and generates again, up to `max_tool_calling_iterations`
rounds (`_tool_call_loop`). Tool-result tokens get `tool_mask = 0`, so the loss covers only what the
model wrote. A tool is a plain Python callable whose JSON schema transformers' `get_json_schema` reads
from its name, type hints and Google-style docstring; standalone `tools=` are shared by every rollout,
while `environment_factory=` gives each rollout its own object (reset before every batch) whose public
methods are the tools. We use the latter: every trajectory gets its own interpreter session, so
variables persist between the calls of one trajectory and never leak into another.

`ToolEnvironment` bridges TRL's synchronous calls to our async `Tool.run`: each environment owns a
private event loop on which its tool sessions live. `build_tool_environment(["python"])` returns the
environment class (TRL calls it as the factory); its methods are generated from each tool's JSON schema.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

from tfgrpo.finetune.errors import FinetuneError
from tfgrpo.rollout.tools import ToolError, get_tools

#: JSON-schema types → the Python type hints `transformers.get_json_schema` turns back into the same schema
JSON_TYPES: Mapping[str, type] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "array": list,
    "object": dict,
}
#: method names TRL treats specially on an environment (never exposed as tools)
RESERVED_NAMES = ("reset", "get_reward")


class _ToolSessions:
    """The per-trajectory sessions of one environment's tools, on that environment's own event loop.

    Kept apart from the environment so `weakref.finalize` can close it without holding the environment alive.
    """

    def __init__(self, tools: Iterable[Any]):
        self.tools = {tool.name: tool for tool in tools}
        self.loop = asyncio.new_event_loop()
        self.stack: contextlib.AsyncExitStack | None = None
        self.bound: dict[str, Any] = {}

    def run(self, name: str, arguments: dict[str, Any]) -> Any:
        """One tool call (sync): opens the tool's session for this trajectory on first use."""
        return self.loop.run_until_complete(self._run(name, arguments))

    async def _run(self, name: str, arguments: dict[str, Any]) -> Any:
        if name not in self.bound:
            self.stack = self.stack or contextlib.AsyncExitStack()
            self.bound[name] = await self.stack.enter_async_context(self.tools[name].session())
        return await self.bound[name].run(arguments)

    def end_trajectory(self) -> None:
        """Close every open session (kills the interpreter, removes its working directory)."""
        stack, self.stack, self.bound = self.stack, None, {}
        if stack is not None and not self.loop.is_closed():
            self.loop.run_until_complete(stack.aclose())

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.end_trajectory()
        self.loop.run_until_complete(self.loop.shutdown_default_executor())
        self.loop.close()


class ToolEnvironment:
    """One rollout's tools for TRL's `environment_factory`. Subclasses carry `tools` and one method per tool
    (made by `build_tool_environment`); TRL exposes every public method except `reset` / `get_reward`."""

    tools: ClassVar[tuple[Any, ...]] = ()

    def __init__(self) -> None:
        self._sessions = _ToolSessions(self.tools)
        self._finalizer = weakref.finalize(self, self._sessions.close)
        #: this trajectory's calls: {"name", "arguments", "output", "error", "elapsed_s"} (reward functions
        #: receive the environments as `environments=`, so a reward can look at them)
        self.calls: list[dict[str, Any]] = []

    def reset(self, **row: Any) -> None:
        """A new trajectory (TRL calls this with the dataset row before each batch): fresh sessions."""
        self._sessions.end_trajectory()
        self.calls = []

    def _call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        result = self._sessions.run(name, arguments)
        self.calls.append(
            {
                "name": name,
                "arguments": arguments,
                "output": result.output,
                "error": result.error,
                "elapsed_s": result.elapsed_s,
            }
        )
        # Errors the model caused (an exception in its code, a timeout) are returned as text, as in
        # `tfgrpo learn`: the model reads output and error together. TRL's `tools/failure_frequency` counts
        # only calls that raised (an unknown tool, arguments that do not bind).
        return result.as_observation()

    def _close(self) -> None:
        """Close every session and the event loop now (otherwise done when garbage-collected or at exit)."""
        self._finalizer()


def _docstring(tool: Any) -> str:
    """A Google-style docstring `transformers.get_json_schema` parses back into the tool's schema."""
    lines = [" ".join(tool.description.split()), "", "Args:"]
    for name, schema in tool.parameters.get("properties", {}).items():
        description = " ".join(str(schema.get("description", name)).split())
        if "enum" in schema:
            description += f" (choices: {json.dumps(schema['enum'])})"
        lines.append(f"    {name}: {description}")
    lines += ["", "Returns:", "    What the tool printed or returned, then its error message if it failed."]
    return "\n".join(lines)


def _tool_method(tool: Any) -> Callable[..., str]:
    """A method `name(self, *, arg: type, ...) -> str` whose signature and docstring describe `tool`."""
    properties: dict[str, Any] = tool.parameters.get("properties", {})
    required = set(tool.parameters.get("required", []))
    bad = [name for name in [tool.name, *properties] if not name.isidentifier()]
    if bad:
        raise FinetuneError(
            f"tool '{tool.name}': {', '.join(map(repr, bad))} cannot be a Python name; TRL calls "
            "tools as Python functions with keyword arguments"
        )
    name = tool.name

    def method(self: ToolEnvironment, **arguments: Any) -> str:
        return self._call_tool(name, arguments)

    annotations: dict[str, Any] = {}
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for argument, schema in properties.items():
        hint = JSON_TYPES.get(schema.get("type"), str)
        annotations[argument] = hint
        default = inspect.Parameter.empty if argument in required else None
        parameters.append(
            inspect.Parameter(argument, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint)
        )
    method.__signature__ = inspect.Signature(parameters, return_annotation=str)  # type: ignore[attr-defined]
    method.__annotations__ = {**annotations, "return": str}
    method.__name__ = method.__qualname__ = name
    method.__doc__ = _docstring(tool)
    return method


def build_tool_environment(
    names: str | Iterable[str],
    *,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    registry: Any = None,
) -> type[ToolEnvironment]:
    """The environment class for TRL's `environment_factory=`: one method per named tool (`python`, `web_search`,
    "package.module:Class"); `options[name]` are that tool's keyword arguments (e.g. the sandbox limits)."""
    try:
        tools = get_tools(names, options=options, registry=registry)
    except ToolError as exc:
        raise FinetuneError(str(exc)) from None
    if not tools:
        raise FinetuneError("no tools named (e.g. tools: [python])")
    for tool in tools:
        if tool.name in RESERVED_NAMES or tool.name.startswith("_"):
            raise FinetuneError(f"tool name '{tool.name}' is reserved by TRL's environment interface")
    methods = {tool.name: _tool_method(tool) for tool in tools}
    class_name = "".join(part.title() for part in "_".join(methods).split("_")) + "ToolEnvironment"
    return type(class_name, (ToolEnvironment,), {"tools": tuple(tools), "__module__": __name__, **methods})


def check_tool_calling_tokenizer(tokenizer: Any) -> None:
    """Fail early, in words, when the chat template cannot carry tool calls the way TRL needs: it must render
    assistant `tool_calls` and `role: tool` messages, and TRL must know how to parse the model's tool calls
    (a `response_template` on the tokenizer, or a template TRL recognises: Qwen2.5/3, Llama 3.1/3.2, ...)."""
    from trl.chat_template_utils import (
        add_response_schema,
        get_training_chat_template,
        is_chat_template_prefix_preserving,
        supports_tool_calling,
    )

    if not supports_tool_calling(tokenizer):
        raise FinetuneError(
            "the model's chat template cannot render tool calls and tool results; use a "
            "tool-calling model (e.g. Qwen2.5/Qwen3-Instruct, Llama 3.1) or give its tokenizer such "
            "a chat template"
        )
    if getattr(tokenizer, "response_template", None) is None and getattr(tokenizer, "response_schema", None) is None:
        try:
            add_response_schema(tokenizer)  # what TRL's trainer would do; here its error becomes ours
        except ValueError:
            raise FinetuneError(
                "TRL cannot parse tool calls for this chat template (it knows Qwen2.5/Qwen3, "
                "Llama 3.1/3.2, GPT-OSS, GLM-4-MoE, Gemma 4, ...); set `tokenizer.response_template` "
                "(transformers response parsing) or use a model with a known template"
            ) from None
    if not is_chat_template_prefix_preserving(tokenizer):
        try:
            get_training_chat_template(tokenizer)  # TRL swaps in a prefix-preserving copy of known templates
        except ValueError:
            raise FinetuneError(
                "the chat template re-renders earlier turns when a tool result is appended (not "
                "prefix-preserving), and TRL has no training copy of it; TRL's tool loop needs "
                "a prefix-preserving template"
            ) from None
