"""`tfgrpo mcp` driven by the MCP SDK's own client, over both transports, as an agent host drives it: a stdio
subprocess and streamable HTTP on 127.0.0.1. Tools are listed, experiences retrieved for a task, outcomes
recorded into the trace store that `learn --from-traces` reads, oversized inputs and wrong keys refused, and
a changed library file served without a restart."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from typer.testing import CliRunner

from tests.helpers.serve_upstream import ScriptedUpstream, running
from tests.helpers.servers import free_port
from tests.serve.test_serve_online_learning import PROBLEMS, LessonWorld
from tfgrpo.cli.app import app, main
from tfgrpo.experiences import Library
from tfgrpo.serve.dataset import problems_from_traces

pytestmark = pytest.mark.timeout(180)

LESSONS = [
    "Factor the quadratic before solving for its roots.",
    "Index the columns used in SQL joins.",
    "Check units when converting kilometres to miles.",
    "Quote shell variables that may hold spaces.",
]
KEY = "mcp-test-key-4d1f"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": os.getcwd()}


@pytest.fixture
def library_file(tmp_path: Path) -> Path:
    path = tmp_path / "library.json"
    Library.from_texts(LESSONS, task="mixed chores", model="test-model").save(path)
    return path


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "tfgrpo", "mcp", *args]


@contextlib.contextmanager
def http_server(library_file: Path, log: Path, *args: str) -> Iterator[str]:
    """`tfgrpo mcp LIB --transport http` on a free port, its stderr in `log`; yields the /mcp URL once it answers."""
    port = free_port()
    with open(log, "w") as stderr:
        process = subprocess.Popen(
            _command(str(library_file), "--transport", "http", "--port", str(port), *args),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=ENV,
        )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"tfgrpo mcp did not start:\n{log.read_text()[-3000:]}")
            with contextlib.suppress(httpx2.TransportError):
                httpx2.get(url, timeout=5)
                break
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


@contextlib.asynccontextmanager
async def http_client(url: str, key: str | None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            yield client


async def _retrieve_and_record(client: Client, task: str, gold: str) -> dict[str, Any]:
    """The agent's round: list the tools, retrieve for `task`, record the outcome; the recorded reply."""
    assert {tool.name for tool in (await client.list_tools()).tools} == {
        "relevant_experiences",
        "list_experiences",
        "record_outcome",
    }
    found = await client.call_tool("relevant_experiences", {"task": task, "k": 1})
    assert not found.is_error, found.content
    [experience] = found.structured_content["experiences"]
    assert experience["text"] == LESSONS[0] and experience["id"] == "G0"  # the nearest lesson, by the embedder
    assert experience["credit"]["verdict"] == "untested"
    recorded = await client.call_tool(
        "record_outcome", {"task": task, "experience_ids": [experience["id"]], "reward": 1.0, "gold": gold}
    )
    assert not recorded.is_error, recorded.content
    return recorded.structured_content


def _learnable(traces: Path, tmp_path: Path) -> dict[str, str]:
    """What `learn --from-traces` trains on: problem text -> gold answer."""
    out = tmp_path / "from-traces.jsonl"
    problems_from_traces(traces, out)
    return {row["problem"]: row["answer"] for row in map(json.loads, out.read_text().splitlines())}


async def test_stdio_session_retrieves_records_and_refuses_oversized_input(library_file: Path, tmp_path: Path) -> None:
    traces = tmp_path / "traces.sqlite"
    server = StdioServerParameters(
        command=sys.executable,
        args=_command(
            str(library_file), "--traces", str(traces), "--max-task-chars", "200", "--max-k", "3", "--default-k", "2"
        )[1:],
        env=ENV,
    )
    task = "Solve x^2 - 5x + 6 = 0 for x."
    async with Client(server) as client:
        reply = await _retrieve_and_record(client, task, gold="2, 3")
        assert reply["library_version"] == 0 and reply["has_gold"] is True
        listing = (await client.call_tool("list_experiences", {})).structured_content
        assert [e["text"] for e in listing["experiences"]] == LESSONS and listing["task"] == "mixed chores"
        for arguments, refusal in (
            ({"task": "x" * 201}, "task is 201 characters; at most 200"),
            ({"task": "units", "k": 4}, "k must be between 1 and 3"),
            ({"task": "   "}, "task must not be empty"),
        ):
            refused = await client.call_tool("relevant_experiences", arguments)
            assert refused.is_error and refusal in refused.content[0].text
        for arguments, refusal in (
            ({"task": task, "experience_ids": ["G99"], "reward": 1.0}, "not in the library"),
            ({"task": task, "experience_ids": ["G0"], "reward": 7.0}, "reward must be between 0 and 1"),
        ):
            refused = await client.call_tool("record_outcome", arguments)
            assert refused.is_error and refusal in refused.content[0].text
        resource = await client.read_resource("tfgrpo://library.json")
        assert Library.model_validate_json(resource.contents[0].text).experiences[0].text == LESSONS[0]
    assert _learnable(traces, tmp_path) == {task: "2, 3"}  # the refused outcomes stored nothing


async def test_http_session_needs_its_key_and_serves_a_changed_library(library_file: Path, tmp_path: Path) -> None:
    traces = tmp_path / "traces.sqlite"
    keys = tmp_path / "keys.txt"
    keys.write_text(f"# agents\n{KEY}\n")
    log = tmp_path / "mcp.log"
    task = "Find the roots of x^2 + x - 2."
    args = (
        "--client-keys",
        str(keys),
        "--traces",
        str(traces),
        "--reload-interval-s",
        "0.2",
        "--max-request-bytes",
        "4096",
    )
    with http_server(library_file, log, *args) as url:
        async with http_client(url, KEY) as client:
            await _retrieve_and_record(client, task, gold="1, -2")
            grown = Library.load(library_file)
            grown.experiences[1] = grown.experiences[1].model_copy(update={"text": "Read the query plan first."})
            grown.save(library_file)
            deadline = time.monotonic() + 60
            while True:  # hot reload: the next listing shows the edited lesson, no restart
                listing = (await client.call_tool("list_experiences", {})).structured_content
                if listing["experiences"][1]["text"] == "Read the query plan first.":
                    break
                assert time.monotonic() < deadline, listing
                time.sleep(0.2)
        for key in ("wrong-key-77", None):
            with pytest.raises(Exception) as refused:  # noqa: PT011 - the SDK's client reports it from a task group
                async with http_client(url, key) as client:
                    await client.list_tools()
            assert "MCPError" in repr(refused.value)
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            answer = httpx2.post(url, json={}, headers=headers, timeout=30)
            assert answer.status_code == 401
            assert answer.json()["error"]["code"] == ("invalid_api_key" if key else "missing_api_key")
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "list_experiences"}}
        padded = json.dumps({**call, "padding": "x" * 5000})
        headers = {"Authorization": f"Bearer {KEY}", "content-type": "application/json"}
        assert httpx2.post(url, content=padded, headers=headers, timeout=30).status_code == 413  # body over the cap
    assert _learnable(traces, tmp_path) == {task: "1, -2"}
    text = log.read_text()
    assert KEY not in text and "wrong-key-77" not in text  # no key, right or wrong, reaches the log


def test_learn_from_traces_learns_from_outcomes_recorded_over_mcp(library_file: Path, tmp_path: Path) -> None:
    """The agent loop closed: outcomes an agent records over MCP are the problems `learn --from-traces` learns on
    (the scripted model answers A+B right half the time, unless the learned lesson is in its prompt)."""
    traces = tmp_path / "traces.sqlite"
    server = StdioServerParameters(
        command=sys.executable, args=_command(str(library_file), "--traces", str(traces))[1:], env=ENV
    )

    async def agent_sessions() -> None:
        async with Client(server) as client:
            for a, b in PROBLEMS:
                task = f"What is {a}+{b}?"
                found = await client.call_tool("relevant_experiences", {"task": task, "k": 1})
                ids = [e["id"] for e in found.structured_content["experiences"]]
                arguments = {"task": task, "experience_ids": ids, "reward": 0.0, "answer": "0", "gold": str(a + b)}
                assert not (await client.call_tool("record_outcome", arguments)).is_error

    asyncio.run(agent_sessions())
    with running(ScriptedUpstream(responder=LessonWorld().reply_for)) as upstream:
        args = ["learn", "--from-traces", str(traces), "--out", str(tmp_path / "run"), "--backend", "openai"]
        args += ["--model", "m", "--base-url", upstream + "/v1", "--api-key", "sk-test", "-G", "4", "--epochs", "1"]
        result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    problems = [json.loads(line) for line in (tmp_path / "run" / "traces_problems.jsonl").read_text().splitlines()]
    assert sorted((p["problem"], p["answer"]) for p in problems) == sorted(
        (f"What is {a}+{b}?", str(a + b)) for a, b in PROBLEMS
    )
    learned = {e.text for e in Library.load(tmp_path / "run" / "library.json")}
    assert learned >= {f"When adding {a} and {b}, check the carry." for a, b in PROBLEMS}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--transport", "http", "--host", "0.0.0.0"], "listening on 0.0.0.0 needs client_keys"),
        (["--client-keys", "keys.txt"], "client_keys guard the http transport"),
        (["--default-k", "9", "--max-k", "3"], "default_k (9) must not exceed max_k (3)"),
        (["--transport", "http", "--client-keys", "no-such-keys.txt"], "client_keys no-such-keys.txt: cannot read it"),
    ],
)
def test_bad_settings_are_one_line(
    library_file: Path, args: list[str], message: str, capsys: pytest.CaptureFixture
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["mcp", str(library_file), *args])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_missing_library_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as info:
        main(["mcp", str(tmp_path / "none.json")])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "none.json" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
