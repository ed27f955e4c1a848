"""Multi-turn trajectories through both protocols, driven by a scripted backend through the real client."""

from __future__ import annotations

import json

import pytest

from tfgrpo.llm.backends.scripted import ScriptedBackend
from tfgrpo.llm.cache import ResponseCache
from tfgrpo.llm.client import LLMClient
from tfgrpo.llm.errors import BudgetExceededError, InvalidRequestError, PermanentError
from tfgrpo.llm.types import Completion
from tfgrpo.rollout.agent import (
    Agent,
    AgentConfig,
    Trajectory,
    has_final_answer,
    parse_text_calls,
    resolve_protocol,
    run_agent,
)
from tfgrpo.rollout.tools import Tool, ToolError, ToolResult
from tfgrpo.rollout.tools.python_sandbox import PythonTool

pytestmark = pytest.mark.timeout(60)

PROBLEM = [
    {"role": "system", "content": "Experiences:\n[E1]. Check arithmetic with code."},
    {"role": "user", "content": "What is 6 * 7?"},
]


class CalculatorTool(Tool):
    """Deterministic and fast: evaluates `a op b`; division by zero is a tool error."""

    name = "calculator"
    description = "Compute a op b."
    parameters = {
        "type": "object",
        "properties": {"a": {"type": "number"}, "op": {"type": "string"}, "b": {"type": "number"}},
        "required": ["a", "op", "b"],
    }

    async def run(self, arguments):
        a, op, b = arguments["a"], arguments["op"], arguments["b"]
        if op == "/" and b == 0:
            return ToolResult(error="division by zero")
        return ToolResult(output=str({"+": a + b, "*": a * b, "/": a / b if b else 0}[op]), elapsed_s=0.001)


class CrashingTool(CalculatorTool):
    name = "crashy"

    async def run(self, arguments):
        raise RuntimeError("bug in a user tool")


def tool_call(name: str, arguments, call_id: str = "call_1") -> dict:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}}


def scripted_client(replies_by_turn, *, supports_tools=True, cache=None):
    """The reply of turn k is replies_by_turn[k] (a str, Completion, exception, or callable(request, i))."""

    def respond(request, sample_index):
        turn = sum(m.role == "assistant" for m in request.messages)
        reply = replies_by_turn[min(turn, len(replies_by_turn) - 1)]
        return reply(request, sample_index) if callable(reply) else reply

    backend = ScriptedBackend(respond)
    backend.supports_tools = supports_tools
    return LLMClient(backend, cache=cache, backoff_initial_s=0.001, backoff_max_s=0.001, max_retries=0), backend


def calls_reply(*calls, text="") -> Completion:
    return Completion(text=text, finish_reason="tool_calls", tool_calls=list(calls))


# ------------------------------------------------------------------------------------------ native protocol
async def test_native_trajectory_calls_a_tool_and_answers():
    client, backend = scripted_client(
        [
            calls_reply(tool_call("calculator", {"a": 6, "op": "*", "b": 7}), text="Let me compute."),
            lambda request, i: f"The tool said {request.messages[-1].content}, so \\boxed{{42}}",
        ]
    )
    trajectory = await run_agent(client, PROBLEM, tools=[CalculatorTool()], max_turns=4, sample_index=3, tag="eval")

    assert trajectory.protocol == "native" and trajectory.stop_reason == "final_answer"
    assert trajectory.final_text == "The tool said 42, so \\boxed{42}"
    assert [m["role"] for m in trajectory.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert trajectory.messages[2]["tool_calls"][0]["function"]["name"] == "calculator"
    assert trajectory.messages[3] == {"role": "tool", "tool_call_id": "call_1", "name": "calculator", "content": "42"}
    assert trajectory.num_tool_calls == 1 and trajectory.num_tool_errors == 0
    (call,) = trajectory.turns[0].tool_calls
    assert call.arguments == {"a": 6, "op": "*", "b": 7} and call.output == "42" and call.elapsed_s > 0
    # every turn is one cacheable call for this sample, with the tool schemas and the caller's tag
    assert [(r.n, r.sample_offset, r.tag) for r in backend.calls] == [(1, 3, "eval"), (1, 3, "eval")]
    assert backend.calls[0].tools == [CalculatorTool().openai_schema()]
    assert trajectory.prompt_tokens == sum(t.prompt_tokens for t in trajectory.turns) > 0
    assert trajectory.completion_tokens == len("The tool said 42, so \\boxed{42}".split())


async def test_native_tool_error_is_shown_to_the_model_and_the_run_goes_on():
    client, backend = scripted_client(
        [
            calls_reply(tool_call("calculator", {"a": 1, "op": "/", "b": 0})),
            "Division by zero is undefined. \\boxed{undefined}",
        ]
    )
    trajectory = await run_agent(client, PROBLEM, tools=[CalculatorTool()], max_turns=3)
    assert trajectory.turns[0].tool_calls[0].error == "division by zero"
    assert backend.calls[1].messages[-1].content == "Error: division by zero"
    assert trajectory.num_tool_errors == 1 and trajectory.stop_reason == "final_answer"


async def test_malformed_json_arguments_unknown_tools_and_missing_arguments_become_errors():
    client, backend = scripted_client(
        [
            calls_reply(
                tool_call("calculator", '{"a": 6, "op": "*", "b": 7', "bad_json"),
                tool_call("calculator", "[6, 7]", "not_object"),
                tool_call("search", {"q": "x"}, "unknown"),
                tool_call("calculator", {"a": 6}, "missing"),
                tool_call("crashy", {"a": 1, "op": "+", "b": 1}, "crash"),
                tool_call("calculator", {"a": 6, "op": "*", "b": 7}, "good"),
            ),
            "\\boxed{42}",
        ]
    )
    trajectory = await run_agent(client, PROBLEM, tools=[CalculatorTool(), CrashingTool()], max_turns=3)
    errors = {call.id: call.error for call in trajectory.turns[0].tool_calls}
    assert "not valid JSON" in errors["bad_json"]
    assert "must be a JSON object" in errors["not_object"]
    assert errors["unknown"] == "unknown tool 'search'; available: calculator, crashy"
    assert errors["missing"] == "missing argument(s) op, b for tool 'calculator'"
    assert errors["crash"] == "the tool crashed: RuntimeError: bug in a user tool"
    assert errors["good"] is None
    assert trajectory.turns[0].tool_calls[0].raw_arguments == '{"a": 6, "op": "*", "b": 7'
    tool_messages = [m for m in backend.calls[1].messages if m.role == "tool"]
    assert [m.tool_call_id for m in tool_messages] == ["bad_json", "not_object", "unknown", "missing", "crash", "good"]
    assert tool_messages[-1].content == "42" and tool_messages[0].content.startswith(
        "Error: the arguments are not valid JSON"
    )
    assert trajectory.final_text == "\\boxed{42}"


async def test_max_turns_stops_a_model_that_never_answers():
    client, backend = scripted_client([calls_reply(tool_call("calculator", {"a": 1, "op": "+", "b": 1}))])
    trajectory = await run_agent(client, PROBLEM, tools=[CalculatorTool()], max_turns=3)
    assert trajectory.stop_reason == "max_turns" and len(trajectory.turns) == 3 and len(backend.calls) == 3
    assert [c.error for t in trajectory.turns for c in t.tool_calls] == [
        None,
        None,
        "not run: the turn limit was reached",
    ]
    assert trajectory.messages[-1]["role"] == "assistant"


async def test_a_misconfigured_tool_stops_the_run_instead_of_blaming_the_model():
    class Misconfigured(CalculatorTool):
        async def run(self, arguments):
            raise ToolError("web_search: no API key configured")

    client, _ = scripted_client([calls_reply(tool_call("calculator", {"a": 1, "op": "+", "b": 1})), "done"])
    with pytest.raises(ToolError, match="no API key"):
        await run_agent(client, PROBLEM, tools=[Misconfigured()], max_turns=3)


async def test_llm_failure_ends_the_trajectory_with_an_error_and_budget_stop_propagates():
    client, _ = scripted_client(
        [calls_reply(tool_call("calculator", {"a": 1, "op": "+", "b": 1})), InvalidRequestError("400 bad request")]
    )
    trajectory = await run_agent(client, PROBLEM, tools=[CalculatorTool()], max_turns=3)
    assert trajectory.stop_reason == "error" and "400 bad request" in trajectory.error
    assert len(trajectory.turns) == 1 and trajectory.num_tool_calls == 1

    # a bad key is not this trajectory's failure: it stops the run
    client, _ = scripted_client([PermanentError("401 invalid API key")])
    with pytest.raises(PermanentError, match="401"):
        await run_agent(client, PROBLEM, tools=[CalculatorTool()], max_turns=3)

    client, _ = scripted_client([BudgetExceededError(1.0, 1.0)])
    with pytest.raises(BudgetExceededError):
        await run_agent(client, PROBLEM, tools=[CalculatorTool()], max_turns=3)


async def test_cached_trajectory_replays_without_backend_calls_and_samples_stay_distinct(tmp_path):
    def first_turn(request, sample_index):
        return calls_reply(tool_call("calculator", {"a": sample_index, "op": "+", "b": 1}))

    replies = [first_turn, lambda request, i: f"\\boxed{{{request.messages[-1].content}}}"]
    cache_path = tmp_path / "cache.sqlite"
    client, backend = scripted_client(replies, cache=ResponseCache(cache_path))
    first = [await run_agent(client, PROBLEM, tools=[CalculatorTool()], sample_index=i) for i in range(3)]
    assert [t.final_text for t in first] == ["\\boxed{1}", "\\boxed{2}", "\\boxed{3}"]
    served = backend.num_samples_served

    client, backend = scripted_client(replies, cache=ResponseCache(cache_path))
    again = [await run_agent(client, PROBLEM, tools=[CalculatorTool()], sample_index=i) for i in range(3)]
    assert backend.num_samples_served == 0 and served == 6
    assert [t.final_text for t in again] == [t.final_text for t in first]
    assert all(t.cached for t in again) and not any(t.cached for t in first)
    assert again[0].prompt_tokens == first[0].prompt_tokens and again[0].cost_usd == 0.0


# ------------------------------------------------------------------------------------------- text protocol
async def test_text_protocol_runs_fenced_python_and_feeds_back_output():
    client, backend = scripted_client(
        [
            "I will compute it.\n```python\nx = 6 * 7\nprint(x)\n```",
            lambda request, i: "```python\nprint(x + 1)\n```\nOutput:\n```\n999\n```\nSo the answer is 999.",
            "The product is \\boxed{42}.",
        ],
        supports_tools=False,
    )
    trajectory = await run_agent(client, PROBLEM, tools=[PythonTool(timeout_s=5)], max_turns=5)

    assert trajectory.protocol == "text" and trajectory.stop_reason == "final_answer"
    system = trajectory.messages[0]["content"]
    assert system.startswith("Experiences:\n[E1]. Check arithmetic with code.") and "```python" in system
    assert [m["role"] for m in trajectory.messages] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert trajectory.messages[3]["content"].startswith("Output:\n```\n42\n```")
    # the imagined output was cut from turn 2, and the variable from turn 1 was still there
    assert trajectory.turns[1].assistant == "```python\nprint(x + 1)\n```"
    assert trajectory.turns[1].tool_calls[0].output == "43\n"
    assert "Output:\n```\n43\n```" in backend.calls[2].messages[-1].content
    assert backend.calls[0].tools is None
    assert trajectory.final_text == "The product is \\boxed{42}." and trajectory.num_tool_calls == 2


async def test_text_protocol_reports_code_errors_and_tool_call_blocks():
    client, backend = scripted_client(
        [
            "```python\n1 / 0\n```",
            '```tool_call\n{"name": "calculator", "arguments": {"a": 2, "op": "+", "b": 3}}\n```\n```tool_call\n{"name": oops}\n```',
            "\\boxed{5}",
        ],
        supports_tools=False,
    )
    trajectory = await run_agent(client, PROBLEM, tools=[PythonTool(timeout_s=5), CalculatorTool()], max_turns=5)
    first_error = trajectory.turns[0].tool_calls[0].error
    assert "ZeroDivisionError" in first_error
    assert "ZeroDivisionError" in backend.calls[1].messages[-1].content
    good, bad = trajectory.turns[1].tool_calls
    assert good.name == "calculator" and good.output == "5"
    assert "not valid JSON" in bad.error
    observation = backend.calls[2].messages[-1].content
    assert "[calculator #1]\nOutput:\n```\n5\n```" in observation and "not valid JSON" in observation
    assert "calculator: Compute a op b." in trajectory.messages[0]["content"]


async def test_text_protocol_max_turns_and_last_turn_warning():
    client, backend = scripted_client(["```python\nprint('again')\n```"], supports_tools=False)
    trajectory = await run_agent(client, [PROBLEM[1]], tools=[PythonTool(timeout_s=5)], max_turns=2)
    assert trajectory.stop_reason == "max_turns" and len(trajectory.turns) == 2
    assert trajectory.messages[0]["role"] == "system"  # instructions added as a system message
    assert "last tool use" in backend.calls[1].messages[-1].content
    assert trajectory.turns[-1].tool_calls[0].error == "not run: the turn limit was reached"


def test_final_answer_and_block_parsing():
    assert has_final_answer("so \\boxed{3}")
    assert not has_final_answer("```python\nprint('\\\\boxed{3}')\n```")
    reply, calls = parse_text_calls("```\nplain block\n```\nNo code here.")
    assert calls == [] and reply.endswith("No code here.")
    reply, calls = parse_text_calls("```py\na = 1\n```\n```output\n1\n```\nmore")
    assert reply == "```py\na = 1\n```" and calls[0].arguments == {"code": "a = 1\n"}


async def test_a_boxed_answer_with_code_is_final_and_code_is_not_run():
    client, backend = scripted_client(["```python\nprint(42)\n```\nThe answer is \\boxed{42}."], supports_tools=False)
    trajectory = await run_agent(client, PROBLEM, tools=[PythonTool(timeout_s=5)], max_turns=3)
    assert trajectory.stop_reason == "final_answer" and trajectory.num_tool_calls == 0 and len(backend.calls) == 1


# ----------------------------------------------------------------------------- protocol choice, records, API
async def test_auto_protocol_follows_the_backend():
    native_client, _ = scripted_client(["x"], supports_tools=True)
    text_client, _ = scripted_client(["x"], supports_tools=False)
    assert resolve_protocol(native_client, "auto") == "native"
    assert resolve_protocol(text_client, "auto") == "text"
    assert resolve_protocol(native_client, "text") == "text"


async def test_native_protocol_with_the_real_python_sandbox_keeps_state():
    client, _ = scripted_client(
        [
            calls_reply(tool_call("python", {"code": "total = sum(range(10))"})),
            calls_reply(tool_call("python", {"code": "print(total)"})),
            lambda request, i: f"\\boxed{{{request.messages[-1].content}}}",
        ]
    )
    trajectory = await run_agent(client, PROBLEM, tools=[PythonTool(timeout_s=5)], max_turns=4)
    assert trajectory.final_text == "\\boxed{45}"
    assert trajectory.turns[0].tool_calls[0].output == ""
    assert trajectory.messages[3]["content"] == "(no output)"


async def test_records_serialise_and_render_for_the_summary_stage():
    long_output = "digits " * 5000
    client, _ = scripted_client(
        [
            calls_reply(tool_call("calculator", {"a": 6, "op": "*", "b": 7}), text="Computing 6*7."),
            calls_reply(tool_call("calculator", {"a": 1, "op": "/", "b": 0})),
            lambda request, i: f"{long_output} \\boxed{{42}}",
        ]
    )
    trajectory = await run_agent(client, PROBLEM, tools=[CalculatorTool()], max_turns=4)
    data = json.loads(json.dumps(trajectory.to_jsonable()))
    assert data["num_tool_calls"] == 2 and data["num_tool_errors"] == 1 and data["stop_reason"] == "final_answer"
    assert data["turns"][0]["tool_calls"][0]["arguments"] == {"a": 6, "op": "*", "b": 7}
    assert Trajectory.from_jsonable(data) == trajectory

    text = trajectory.render_for_summary(max_chars=1500)
    assert len(text) <= 1500
    assert "[tool call: calculator]" in text and '{"a": 6, "op": "*", "b": 7}' in text
    assert "[tool result: calculator, ok" in text and "\n42\n" in text
    assert "[tool result: calculator, error" in text and "Error: division by zero" in text
    assert "chars omitted" in text and text.rstrip().endswith("[end: final answer given]")
    assert "\\boxed{42}" in text  # the tail of a cut reply is kept
    assert "Computing 6*7." in text  # short parts stay whole


async def test_agent_binds_tools_like_the_rollout_runner_calls_it():
    client, backend = scripted_client([calls_reply(tool_call("python", {"code": "print(2 + 2)"})), "\\boxed{4}"])
    agent = AgentConfig(tools=["python"], max_turns=3, tool_options={"python": {"timeout_s": 5}}).build()
    assert isinstance(agent, Agent) and agent.tools[0].config.timeout_s == 5
    trajectory = await agent(client, PROBLEM, sampling=None, tag="rollout", sample_index=1)
    assert trajectory.final_text == "\\boxed{4}" and trajectory.turns[0].tool_calls[0].output == "4\n"
    assert backend.calls[0].sample_offset == 1


async def test_no_tools_is_a_single_turn():
    client, backend = scripted_client(["\\boxed{42}"])
    trajectory = await run_agent(client, PROBLEM, tools=[], max_turns=3)
    assert len(trajectory.turns) == 1 and backend.calls[0].tools is None and trajectory.messages[:2] == PROBLEM


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_embedded_smollm2_completes_a_tool_enabled_trajectory():
    """The real small model through the text protocol: its code may be wrong; the run must finish and record it."""
    from tfgrpo.llm.backends.transformers_backend import TransformersBackend
    from tfgrpo.llm.types import SamplingParams

    client = LLMClient(TransformersBackend(None, batch_size=4), max_retries=0)
    messages = [{"role": "user", "content": "Use Python to compute 17 * 23, then give the answer in \\boxed{}."}]
    try:
        trajectories = [
            await run_agent(
                client,
                messages,
                tools=[PythonTool(timeout_s=10)],
                max_turns=3,
                sample_index=i,
                sampling=SamplingParams(temperature=0.7, max_tokens=96, seed=i),
            )
            for i in range(2)
        ]
    finally:
        await client.aclose()
    for trajectory in trajectories:
        assert trajectory.protocol == "text" and trajectory.stop_reason in ("final_answer", "max_turns")
        assert 1 <= len(trajectory.turns) <= 3 and trajectory.final_text == trajectory.turns[-1].assistant
        assert trajectory.completion_tokens > 0
        for call in (c for t in trajectory.turns for c in t.tool_calls):
            assert call.name == "python" and (call.error is not None or call.output is not None)
        json.dumps(trajectory.to_jsonable())
        assert trajectory.render_for_summary(2000)
