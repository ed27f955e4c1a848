"""Multi-turn rollouts: the model may call tools, sees their results, and goes on until it answers.

Two protocols:
- **native**: OpenAI tool calling. The request carries `tools=[...]`; the reply's `tool_calls` are run
  and answered with `role: tool` messages.
- **text**: for models and servers without tool calling (the embedded SmolLM2, llama.cpp, raw
  prompts). The system prompt explains the convention (`prompts/agent_text_protocol.jinja`); a fenced
  ```python block is run, a ```tool_call block with JSON calls any other tool, and the outputs come back
  as a user message with `Output:` blocks (`prompts/agent_text_observation.jinja`).
A reply without a tool call is the final answer; so is a reply with a \\boxed{} answer outside code.

Every turn is one `client.chat(..., n=1, sample_offset=sample_index)` call: the conversation so far
is the cache key and the sample index keeps the G trajectories of a group distinct, so a resumed run
replays a trajectory from the cache, turn by turn, as long as the tools return the same outputs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from tfgrpo.core.secrets import SecretOptions, reveal_secrets
from tfgrpo.llm.errors import PER_REQUEST_FAILURES
from tfgrpo.llm.types import Completion, Message, SamplingParams
from tfgrpo.prompts import render_prompt
from tfgrpo.rollout.tools.base import Tool, ToolError, ToolResult
from tfgrpo.rollout.tools.registry import BUILTIN_TOOLS, get_tools
from tfgrpo.rollout.trajectory import ToolCallRecord, Trajectory, Turn

logger = logging.getLogger(__name__)

Protocol = Literal["auto", "native", "text"]
FENCED_BLOCK = re.compile(r"```[ \t]*([A-Za-z_0-9]*)[ \t]*\n(.*?)```", re.DOTALL)
PYTHON_LANGUAGES = frozenset({"python", "py", "python3"})
TOOL_CALL_LANGUAGES = frozenset({"tool_call", "tool"})
#: a model that writes its own "Output:" after a code block is imagining the result: cut it there
IMAGINED_OUTPUT = re.compile(r"^[ \t]*Output:", re.MULTILINE)
BOXED = re.compile(r"\\boxed\s*\{")


class AgentConfig(BaseModel):
    """How multi-turn rollouts run (embedded by the learn and eval configs)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    tools: list[str] = Field(default_factory=list, description="Tool names, e.g. ['python'].")
    max_turns: int = Field(6, ge=1, description="Assistant turns per trajectory.")
    protocol: Protocol = Field("auto", description="native tool calling, text (fenced code blocks), or auto.")
    tool_options: dict[str, SecretOptions] = Field(
        default_factory=dict,
        description="Per-tool options, e.g. {python: {timeout_s: 5}}; a secret-named one (api_key, token, "
        "password, at any depth) is written masked.",
    )
    tool_timeout_s: float = Field(300.0, gt=0, description="Backstop wall time of any one tool call.")

    @field_validator("tools")
    @classmethod
    def _known_tools(cls, names: list[str]) -> list[str]:
        # Refused with the config, before a run directory or a cache exists (not when the first rollout starts).
        unknown = [name for name in names if name not in BUILTIN_TOOLS and ":" not in name]
        if unknown:
            raise ValueError(
                f"unknown tool '{unknown[0]}'; available: {', '.join(sorted(BUILTIN_TOOLS))} "
                "(or 'package.module:ClassName' for your own)"
            )
        return names

    @field_validator("tool_options")
    @classmethod
    def _options_fit_their_tools(
        cls, options: dict[str, dict[str, Any]], info: ValidationInfo
    ) -> dict[str, dict[str, Any]]:
        # A built-in tool's options are checked by building it (cheap: no sandbox starts), with the config,
        # so `timeout: 5` or `timeout_s: -1` is refused before a run directory exists.
        for name, values in options.items():
            if name in BUILTIN_TOOLS:
                try:
                    BUILTIN_TOOLS[name](**reveal_secrets(values))  # as build() will pass them
                except ToolError as exc:
                    raise ValueError(str(exc)) from None
            elif name not in (info.data.get("tools") or []):
                raise ValueError(
                    f"options for '{name}', which is neither a built-in tool ({', '.join(sorted(BUILTIN_TOOLS))}) "
                    "nor one of `tools`"
                )
        return options

    def build(self) -> Agent:
        return Agent(
            get_tools(self.tools, options=reveal_secrets(self.tool_options)),
            max_turns=self.max_turns,
            protocol=self.protocol,
            tool_timeout_s=self.tool_timeout_s,
        )


class Agent:
    """`run_agent` with its tools bound: `await agent(client, messages, sampling=..., tag=..., sample_index=i)`."""

    def __init__(
        self, tools: Sequence[Tool], *, max_turns: int = 6, protocol: Protocol = "auto", tool_timeout_s: float = 300.0
    ):
        self.tools = list(tools)
        self.max_turns = max_turns
        self.protocol = protocol
        self.tool_timeout_s = tool_timeout_s

    async def __call__(self, client: Any, messages: Sequence[Message | dict[str, Any]], **kwargs: Any) -> Trajectory:
        kwargs.setdefault("max_turns", self.max_turns)
        kwargs.setdefault("protocol", self.protocol)
        kwargs.setdefault("tool_timeout_s", self.tool_timeout_s)
        return await run_agent(client, messages, tools=self.tools, **kwargs)


def resolve_protocol(client: Any, protocol: Protocol) -> Literal["native", "text"]:
    if protocol != "auto":
        return protocol
    backends = getattr(client, "backends", None) or []
    return "native" if backends and all(getattr(b, "supports_tools", False) for b in backends) else "text"


async def run_agent(
    client: Any,
    messages: Sequence[Message | dict[str, Any]],
    *,
    tools: Sequence[Tool],
    sampling: SamplingParams | None = None,
    max_turns: int = 6,
    protocol: Protocol = "auto",
    tag: str = "rollout",
    sample_index: int = 0,
    tool_timeout_s: float = 300.0,
) -> Trajectory:
    """Drive one trajectory. An LLM call that fails after the client's retries ends it with
    `stop_reason="error"` (the rollout is then unscored); a budget stop propagates."""
    if max_turns < 1:
        raise ValueError("max_turns must be at least 1")
    chosen = resolve_protocol(client, protocol)
    conversation = [m.to_wire() if isinstance(m, Message) else dict(m) for m in messages]
    if chosen == "text" and tools:
        conversation = with_text_protocol(conversation, tools)
    trajectory = Trajectory(protocol=chosen, messages=conversation)
    schemas = [tool.openai_schema() for tool in tools] if chosen == "native" and tools else None
    started = time.monotonic()
    async with contextlib.AsyncExitStack() as stack:
        bound = {tool.name: await stack.enter_async_context(tool.session()) for tool in tools}
        runner = _ToolRunner(bound, tool_timeout_s)
        for index in range(max_turns):
            try:
                (completion,) = await client.chat(
                    conversation, n=1, sampling=sampling, tools=schemas, tag=tag, sample_offset=sample_index
                )
            except PER_REQUEST_FAILURES as exc:
                trajectory.stop_reason, trajectory.error = "error", f"{type(exc).__name__}: {exc}"
                break
            turn = _turn(index, completion)
            trajectory.turns.append(turn)
            last_turn = index == max_turns - 1
            if chosen == "native":
                done = await _native_step(completion, turn, conversation, runner, last_turn)
            else:
                done = await _text_step(
                    completion, turn, conversation, runner, last_turn=last_turn, warn_last=index == max_turns - 2
                )
            trajectory.final_text = turn.assistant
            if done:
                trajectory.stop_reason = "final_answer"
                break
        else:
            trajectory.stop_reason = "max_turns"
    trajectory.messages = conversation  # pydantic copied the list it was given
    trajectory.elapsed_s = time.monotonic() - started
    return trajectory


def _turn(index: int, completion: Completion) -> Turn:
    return Turn(
        index=index,
        assistant=completion.text or "",
        reasoning=completion.reasoning,
        finish_reason=completion.finish_reason,
        prompt_tokens=completion.usage.prompt_tokens,
        completion_tokens=completion.usage.completion_tokens,
        cached_prompt_tokens=completion.usage.cached_prompt_tokens,
        cost_usd=completion.cost_usd,
        latency_s=completion.latency_s,
        cached=completion.cached,
    )


class _ToolRunner:
    """Runs one parsed call against the trajectory's tool sessions; every failure becomes a record."""

    def __init__(self, tools: dict[str, Tool], timeout_s: float):
        self.tools = tools
        self.timeout_s = timeout_s

    async def run(self, record: ToolCallRecord) -> ToolCallRecord:
        if record.error is not None or record.arguments is None:
            return record  # the arguments could not be parsed: that error is the result
        tool = self.tools.get(record.name)
        if tool is None:
            record.error = f"unknown tool '{record.name}'; available: {', '.join(sorted(self.tools)) or 'none'}"
            return record
        missing = tool.missing_arguments(record.arguments)
        if missing:
            record.error = f"missing argument(s) {', '.join(missing)} for tool '{record.name}'"
            return record
        started = time.monotonic()
        try:
            result = await asyncio.wait_for(tool.run(record.arguments), self.timeout_s)
        except asyncio.TimeoutError:
            result = ToolResult(error=f"the tool did not answer within {self.timeout_s:g} s")
        except ToolError:
            raise  # misconfiguration: the user must fix it, not the model
        except Exception as exc:  # noqa: BLE001 - a crashing user tool is shown to the model and logged, not hidden
            logger.warning("tool %s crashed: %s: %s", record.name, type(exc).__name__, exc)
            result = ToolResult(error=f"the tool crashed: {type(exc).__name__}: {exc}")
        record.output, record.error, record.truncated = result.output, result.error, result.truncated
        record.elapsed_s = result.elapsed_s or (time.monotonic() - started)
        return record


def observation(record: ToolCallRecord) -> str:
    return ToolResult(output=record.output, error=record.error, truncated=record.truncated).as_observation()


# ---------------------------------------------------------------------------------------- native protocol
def _parse_arguments(raw: Any) -> tuple[str, dict[str, Any] | None, str | None]:
    """(raw text, parsed dict or None, error)."""
    if isinstance(raw, dict):
        return json.dumps(raw, ensure_ascii=False), raw, None
    text = raw if isinstance(raw, str) else json.dumps(raw)
    try:
        parsed = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        return text, None, f"the arguments are not valid JSON ({exc.msg} at char {exc.pos}); send a JSON object"
    if not isinstance(parsed, dict):
        return text, None, f"the arguments must be a JSON object, got {type(parsed).__name__}"
    return text, parsed, None


async def _native_step(
    completion: Completion, turn: Turn, conversation: list[dict[str, Any]], runner: _ToolRunner, last_turn: bool
) -> bool:
    calls = completion.tool_calls or []
    wire_calls = []
    for position, call in enumerate(calls):
        function = call.get("function") or {}
        raw, arguments, error = _parse_arguments(function.get("arguments", ""))
        record = ToolCallRecord(
            id=str(call.get("id") or f"call_{turn.index}_{position}"),
            name=str(function.get("name") or ""),
            raw_arguments=raw,
            arguments=arguments,
            error=error,
        )
        turn.tool_calls.append(record)
        wire_calls.append({"id": record.id, "type": "function", "function": {"name": record.name, "arguments": raw}})
    message: dict[str, Any] = {"role": "assistant", "content": completion.text or ""}
    if wire_calls:
        message["tool_calls"] = wire_calls
    conversation.append(message)
    if not calls:
        return True
    for record in turn.tool_calls:
        if last_turn:
            record.error = record.error or "not run: the turn limit was reached"
            continue
        await runner.run(record)
        conversation.append(
            {"role": "tool", "tool_call_id": record.id, "name": record.name, "content": observation(record)}
        )
    return False


# ------------------------------------------------------------------------------------------ text protocol
def with_text_protocol(conversation: list[dict[str, Any]], tools: Sequence[Tool]) -> list[dict[str, Any]]:
    """The conversation with the protocol instructions appended to the system prompt (or as one)."""
    instructions = render_prompt(
        "agent_text_protocol",
        python=any(tool.name == "python" for tool in tools),
        other_tools=[
            {"name": t.name, "description": t.description, "parameters": t.parameters}
            for t in tools
            if t.name != "python"
        ],
    )
    conversation = [dict(m) for m in conversation]
    if conversation and conversation[0].get("role") == "system":
        conversation[0]["content"] = f"{conversation[0].get('content') or ''}\n\n{instructions}".strip()
    else:
        conversation.insert(0, {"role": "system", "content": instructions})
    return conversation


def parse_text_calls(reply: str, *, turn_index: int = 0) -> tuple[str, list[ToolCallRecord]]:
    """(the reply cut before any output the model imagined itself, the calls its fenced blocks ask for)."""
    calls: list[ToolCallRecord] = []
    for match in FENCED_BLOCK.finditer(reply):
        if not _is_call(match):
            continue
        calls.append(_text_call(match, turn_index, len(calls)))
        next_block = FENCED_BLOCK.search(reply, match.end())
        if next_block is not None and next_block.group(1).lower() == "output":
            return reply[: next_block.start()].rstrip(), calls
        imagined = IMAGINED_OUTPUT.search(reply, match.end(), next_block.start() if next_block else len(reply))
        if imagined is not None:
            return reply[: imagined.start()].rstrip(), calls
    return reply, calls


def _is_call(match: re.Match) -> bool:
    language = match.group(1).lower()
    return language in PYTHON_LANGUAGES or language in TOOL_CALL_LANGUAGES


def _text_call(match: re.Match, turn_index: int, position: int) -> ToolCallRecord:
    call_id = f"text_{turn_index}_{position}"
    body = match.group(2)
    if match.group(1).lower() in PYTHON_LANGUAGES:
        return ToolCallRecord(id=call_id, name="python", raw_arguments=body, arguments={"code": body})
    raw, parsed, error = _parse_arguments(body)
    if parsed is None:
        return ToolCallRecord(id=call_id, name="tool_call", raw_arguments=raw, error=error)
    name = parsed.get("name")
    if not isinstance(name, str):
        return ToolCallRecord(
            id=call_id, name="tool_call", raw_arguments=raw, error='a tool_call block needs "name" and "arguments"'
        )
    arguments = parsed.get("arguments", {})
    if not isinstance(arguments, dict):
        return ToolCallRecord(id=call_id, name=name, raw_arguments=raw, error='"arguments" must be a JSON object')
    return ToolCallRecord(id=call_id, name=name, raw_arguments=raw, arguments=arguments)


def has_final_answer(reply: str) -> bool:
    """A \\boxed{} answer outside fenced blocks."""
    return BOXED.search(FENCED_BLOCK.sub("", reply)) is not None


async def _text_step(
    completion: Completion,
    turn: Turn,
    conversation: list[dict[str, Any]],
    runner: _ToolRunner,
    *,
    last_turn: bool,
    warn_last: bool,
) -> bool:
    reply, calls = parse_text_calls(completion.text or "", turn_index=turn.index)
    turn.assistant = reply
    conversation.append({"role": "assistant", "content": reply})
    if not calls or has_final_answer(reply):
        return True
    turn.tool_calls.extend(calls)
    if last_turn:
        for record in calls:
            record.error = record.error or "not run: the turn limit was reached"
        return False
    for record in calls:
        await runner.run(record)
    results = [{"name": record.name, "observation": observation(record)} for record in calls]
    conversation.append(
        {"role": "user", "content": render_prompt("agent_text_observation", results=results, last_turn=warn_last)}
    )
    return False
