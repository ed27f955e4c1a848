"""A multi-turn rollout as data: its turns, the tool calls of each turn, and the totals of the whole.

`tfgrpo.rollout.agent` produces a `Trajectory`; rollout rows store it as JSON, and learn's summary stage
renders it for the summarising model (`render_for_summary`), within a character budget.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class ToolCallRecord(BaseModel):
    id: str
    name: str
    raw_arguments: str = Field(description="The arguments exactly as the model wrote them.")
    arguments: dict[str, Any] | None = Field(None, description="Parsed arguments; None when they were not valid JSON.")
    output: str = ""
    error: str | None = None
    elapsed_s: float = 0.0
    truncated: bool = False


class Turn(BaseModel):
    index: int
    assistant: str
    reasoning: str | None = None  # the model's thinking before this turn's reply (never sent back)
    tool_calls: list[ToolCallRecord] = Field(default_factory=list)
    finish_reason: str | None = None
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0  # of prompt_tokens, served from the provider's prompt cache
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0
    cached: bool = False


class Trajectory(BaseModel):
    """Everything one multi-turn rollout did. `messages` is the whole conversation, final reply included."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    protocol: Literal["native", "text"]
    messages: list[dict[str, Any]]
    turns: list[Turn] = Field(default_factory=list)
    final_text: str = ""
    stop_reason: Literal["final_answer", "max_turns", "error"] = "final_answer"
    error: str | None = None
    elapsed_s: float = 0.0

    @property
    def num_tool_calls(self) -> int:
        return sum(len(turn.tool_calls) for turn in self.turns)

    @property
    def num_tool_errors(self) -> int:
        return sum(call.error is not None for turn in self.turns for call in turn.tool_calls)

    @property
    def prompt_tokens(self) -> int:
        return sum(turn.prompt_tokens for turn in self.turns)

    @property
    def cached_prompt_tokens(self) -> int:
        return sum(turn.cached_prompt_tokens for turn in self.turns)

    @property
    def completion_tokens(self) -> int:
        return sum(turn.completion_tokens for turn in self.turns)

    @property
    def cost_usd(self) -> float:
        return sum(turn.cost_usd for turn in self.turns)

    @property
    def cached(self) -> bool:
        return bool(self.turns) and all(turn.cached for turn in self.turns)

    def to_jsonable(self) -> dict[str, Any]:
        """The `trajectory` field of a rollouts.jsonl row (totals included for readers without this class)."""
        data = self.model_dump(mode="json")
        data.update(
            num_tool_calls=self.num_tool_calls,
            num_tool_errors=self.num_tool_errors,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            cost_usd=round(self.cost_usd, 8),
        )
        return data

    @classmethod
    def from_jsonable(cls, data: dict[str, Any]) -> Trajectory:
        return cls.model_validate({key: value for key, value in data.items() if key in cls.model_fields})

    def render_for_summary(self, max_chars: int = 8000) -> str:
        """Every turn, tool call and result as compact text, long parts cut in the middle to fit."""
        parts: list[tuple[str, str]] = []  # (header, body); bodies share what the budget leaves
        for turn in self.turns:
            if turn.reasoning:
                parts.append((f"[reasoning, turn {turn.index + 1}]", turn.reasoning.strip()))
            parts.append((f"[assistant, turn {turn.index + 1}]", turn.assistant.strip()))
            for call in turn.tool_calls:
                if self.protocol == "native" or call.name != "python":
                    parts.append((f"[tool call: {call.name}]", _arguments_text(call)))
                status = "error" if call.error else "ok"
                body = call.output.rstrip()
                if call.error:
                    body = f"{body}\nError: {call.error}".strip()
                parts.append((f"[tool result: {call.name}, {status}, {call.elapsed_s:.2f} s]", body or "(no output)"))
        ending = {
            "final_answer": "[end: final answer given]",
            "max_turns": "[end: turn limit reached without a final answer]",
            "error": f"[end: stopped by an error: {self.error}]",
        }[self.stop_reason]
        return _fit(parts, ending, max_chars)


def _arguments_text(call: ToolCallRecord) -> str:
    if call.arguments is not None and set(call.arguments) == {"code"} and isinstance(call.arguments["code"], str):
        return call.arguments["code"].strip()
    return call.raw_arguments


def _fit(parts: list[tuple[str, str]], ending: str, max_chars: int) -> str:
    """Share the budget fairly: short bodies stay whole, long ones get equal cuts (middle elided)."""
    overhead = sum(len(header) + 2 for header, _ in parts) + len(ending)
    budget = max(max_chars - overhead, 40 * max(len(parts), 1))
    lengths = sorted(len(body) for _, body in parts)
    cap, remaining, count = budget, budget, len(lengths)
    for length in lengths:  # water-filling: the cap every body above it is cut to
        cap = remaining // count if count else remaining
        if length > cap:
            break
        remaining -= length
        count -= 1
    else:
        cap = max(lengths, default=0)
    lines = [f"{header}\n{_cut_middle(body, cap)}" for header, body in parts]
    text = "\n".join([*lines, ending])
    return text if len(text) <= max_chars else text[: max_chars - len(ending) - 5] + "\n...\n" + ending


def _cut_middle(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    marker = f"\n...[{len(text) - limit} chars omitted]...\n"
    keep = max(limit - len(marker), 20)
    return text[: keep * 2 // 3] + marker + text[len(text) - keep // 3 :]


__all__ = ["ToolCallRecord", "Trajectory", "Turn"]
