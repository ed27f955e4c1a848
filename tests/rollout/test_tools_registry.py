"""Tool interface, registry, and the web-search tool against a local HTTP server (never the network)."""

from __future__ import annotations

import contextlib
import http.server
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from tfgrpo.rollout.tools import Tool, ToolError, ToolRegistry, ToolResult, get_tools, parse_tool_names
from tfgrpo.rollout.tools.python_sandbox import PythonTool
from tfgrpo.rollout.tools.web_search import WebSearchTool

pytestmark = pytest.mark.timeout(30)


class UpperTool(Tool):
    name = "upper"
    description = "Upper-case a text."
    parameters = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}

    def __init__(self, suffix: str = ""):
        self.suffix = suffix

    async def run(self, arguments):
        return ToolResult(output=arguments["text"].upper() + self.suffix)


def test_openai_schema_is_a_function_entry():
    schema = UpperTool().openai_schema()
    assert schema == {
        "type": "function",
        "function": {"name": "upper", "description": "Upper-case a text.", "parameters": UpperTool.parameters},
    }
    assert PythonTool().openai_schema()["function"]["parameters"]["required"] == ["code"]


def test_missing_arguments_follow_the_schema():
    assert UpperTool().missing_arguments({}) == ["text"]
    assert UpperTool().missing_arguments({"text": "a"}) == []


def test_observation_text_joins_output_truncation_and_error():
    assert ToolResult(output="42\n").as_observation() == "42"
    assert (
        ToolResult(output="x", truncated=True, error="boom").as_observation() == "x\n[output truncated]\nError: boom"
    )
    assert ToolResult().as_observation() == "(no output)"


def test_get_tools_by_name_and_comma_list():
    (python,) = get_tools(["python"])
    assert isinstance(python, PythonTool)
    assert [t.name for t in get_tools("python, web_search", options={"web_search": {"endpoint": "http://x"}})] == [
        "python",
        "web_search",
    ]
    assert get_tools(None) == [] and get_tools("none") == []
    assert parse_tool_names(["python,python", "web_search"]) == ["python", "web_search"]


def test_tool_options_reach_the_tool():
    (python,) = get_tools(["python"], options={"python": {"timeout_s": 3, "memory_mb": 256}})
    assert python.config.timeout_s == 3 and python.config.memory_mb == 256


def test_unknown_names_and_stray_options_are_clear_errors():
    with pytest.raises(ToolError, match="unknown tool 'calculator'; available: python, web_search"):
        get_tools(["calculator"])
    with pytest.raises(ToolError, match="not enabled: web_search"):
        get_tools(["python"], options={"web_search": {}})
    with pytest.raises(ToolError, match="endpoint"):
        get_tools(["web_search"])


def test_registry_accepts_user_tools_by_registration_and_import_path(tmp_path, monkeypatch):
    registry = ToolRegistry()
    registry.register("upper", UpperTool)
    assert "upper" in registry.names()
    (tool,) = get_tools(["upper"], options={"upper": {"suffix": "!"}}, registry=registry)
    assert tool.suffix == "!"

    (tmp_path / "my_tools.py").write_text(
        "from tfgrpo.rollout.tools import Tool, ToolResult\n"
        "class Echo(Tool):\n    name = 'echo'\n    description = 'Echo.'\n"
        "    parameters = {'type': 'object', 'properties': {}}\n"
        "    async def run(self, arguments):\n        return ToolResult(output=str(arguments))\n"
        "not_a_tool = dict\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert get_tools(["my_tools:Echo"])[0].name == "echo"
    with pytest.raises(ToolError, match="not a tfgrpo.rollout.tools.Tool"):
        get_tools(["my_tools:not_a_tool"])
    with pytest.raises(ToolError, match="cannot import module 'no_such_module'"):
        get_tools(["no_such_module:Tool"])
    with pytest.raises(ToolError, match="both named 'python'"):
        registry.register("python2", PythonTool)
        get_tools(["python", "python2"], registry=registry)


class SearchHandler(http.server.BaseHTTPRequestHandler):
    requests: list = []
    status = 200
    body = b""

    def do_GET(self):  # noqa: N802 - http.server's naming
        type(self).requests.append({"path": self.path, "headers": dict(self.headers)})
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def search_server(status: int = 200, payload=None, raw: bytes | None = None) -> Iterator[tuple[str, list]]:
    handler = type(
        "Handler",
        (SearchHandler,),
        {"requests": [], "status": status, "body": raw if raw is not None else json.dumps(payload).encode()},
    )
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/search", handler.requests
    finally:
        server.shutdown()
        server.server_close()


HITS = {
    "results": [
        {
            "title": "Training-Free GRPO",
            "url": "https://example.org/tfgrpo",
            "content": "Learns   experiences\n in context.",
        },
        {"title": "GRPO", "url": "https://example.org/grpo", "content": "Group relative policy optimisation."},
        {"title": "Third", "url": "https://example.org/3", "content": "Not asked for."},
    ]
}


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


async def test_web_search_sends_query_and_key_and_formats_hits():
    with search_server(payload=HITS) as (url, requests):
        tool = WebSearchTool(endpoint=url, api_key="secret", max_results=2, extra_params={"format": "json"})
        result = await tool.run({"query": "training-free grpo"})
    assert result.ok
    assert result.output == (
        "[1] Training-Free GRPO\nhttps://example.org/tfgrpo\nLearns experiences in context.\n\n"
        "[2] GRPO\nhttps://example.org/grpo\nGroup relative policy optimisation."
    )
    (request,) = requests
    query = parse_qs(urlparse(request["path"]).query)
    assert query == {"q": ["training-free grpo"], "count": ["2"], "format": ["json"]}
    assert request["headers"]["Authorization"] == "Bearer secret"


async def test_web_search_reads_a_nested_results_path_and_custom_header():
    payload = {"web": {"results": [{"title": "A", "url": "u", "description": "d"}]}}
    with search_server(payload=payload) as (url, requests):
        tool = WebSearchTool(
            endpoint=url,
            api_key="k",
            auth_header="X-Subscription-Token",
            auth_scheme="",
            results_path="web.results",
            snippet_key="description",
        )
        result = await tool.run({"query": "q"})
    assert result.output == "[1] A\nu\nd"
    assert requests[0]["headers"]["X-Subscription-Token"] == "k"


async def test_web_search_failures_are_tool_errors():
    with search_server(status=500, payload={}) as (url, _):
        assert (await WebSearchTool(endpoint=url).run({"query": "q"})).error == "search failed: HTTP 500"
    with search_server(raw=b"<html>not json</html>") as (url, _):
        assert "search failed" in (await WebSearchTool(endpoint=url).run({"query": "q"})).error
    with search_server(payload={"items": []}) as (url, _):
        assert "no list at 'results'" in (await WebSearchTool(endpoint=url).run({"query": "q"})).error
    with search_server(payload={"results": []}) as (url, _):
        assert (await WebSearchTool(endpoint=url).run({"query": "q"})).output == "No results."
    assert "non-empty" in (await WebSearchTool(endpoint="http://127.0.0.1:9").run({"query": " "})).error


def test_tool_names_are_known_without_importing_the_tools():
    """A learn or eval config checks tool names (and a run without tools builds none): the sandbox's and the
    web search's modules load only when a tool is built (~40 ms of every start-up otherwise)."""
    code = (
        "import sys\n"
        "from tfgrpo.learn.config import LearnConfig\n"
        "from tfgrpo.rollout.tools import BUILTIN_TOOLS, ToolRegistry\n"
        "LearnConfig(data='x.jsonl', agent={'tools': ['python', 'web_search']})\n"
        "assert 'python' in BUILTIN_TOOLS and sorted(BUILTIN_TOOLS) == ToolRegistry().names()\n"
        "loaded = [m for m in sys.modules if m.endswith(('python_sandbox', 'web_search'))]\n"
        "assert not loaded, loaded\n"
        "assert BUILTIN_TOOLS['python'].__name__ == 'PythonTool' and 'tfgrpo.rollout.tools.python_sandbox' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])
