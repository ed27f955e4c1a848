"""No credential given to `tfgrpo learn` or `tfgrpo eval` reaches a file of the run or a line of its output.

A real run of each, through the openai backend against the scripted world server, with one distinct
secret of every kind planted: the LLM's API key, a web_search tool's API key and secret-named extra
query parameters (a key, a token and a secret; used for real: the tool is called and its search server
records them), a secret-named option nested three levels deep in a user tool's options and a `bing_key`
one at its top (a `*_key` of no known owner: issue 27), and credentials in a base URL
(refused at config time, in one line, before any request). Then every byte of every file under the run
directory, and everything printed or logged, is searched for each secret.
"""

from __future__ import annotations

import contextlib
import http.server
import importlib
import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
import yaml

from tests.helpers.cli import run_cli
from tests.helpers.learn_world import World, WorldServer, write_problems

SECRETS = {
    "llm api_key": "sk-llm-PLANTED-1a9f",
    "web_search api_key": "tool-key-PLANTED-4d2e",
    "extra_params apiKey (top)": "xp-top-PLANTED-2b7c",
    "extra_params x-api-key (nested)": "xp-nested-PLANTED-3c5d",
    "extra_params session_token": "xp-token-PLANTED-6f1b",
    "extra_params client_secret": "xp-secret-PLANTED-7a4c",
    "user tool bing_key": "bing-key-PLANTED-8d3e",
    "base_url userinfo": "url-pass-PLANTED-5e8a",
}
STAGE_MARKERS = ("<proposed_changes>", "<attempt ", "<trajectory>")
USER_TOOL = '''
from tfgrpo.rollout.tools import Tool, ToolResult

RECEIVED = []


class OptionsTool(Tool):
    """Never called: it only keeps the options it was built with, to show they arrive in clear."""

    name = "options_echo"
    description = "Echo nothing."
    parameters = {"type": "object", "properties": {}}

    def __init__(self, **options):
        RECEIVED.append(options)

    async def run(self, arguments):
        return ToolResult(output="ok")
'''


class SearchingWorld(World):
    """The scripted world, where a rollout first searches the web (text protocol), then answers."""

    def reply_for(self, messages, index):
        if any(marker in messages[0]["content"] for marker in STAGE_MARKERS):
            return super().reply_for(messages, index)
        if len(messages) <= 2:  # system + problem: the first turn
            return '```tool_call\n{"name": "web_search", "arguments": {"query": "adding with carries"}}\n```'
        problem = next(m for m in messages if m["role"] == "user")
        return super().reply_for([messages[0], problem], index)


@contextlib.contextmanager
def search_server() -> Iterator[tuple[str, list[dict]]]:
    """A search API on 127.0.0.1 answering one hit; yields its URL and the requests it got (path, headers)."""
    seen: list[dict] = []
    body = json.dumps({"results": [{"title": "Carries", "url": "https://example.org", "content": "Carry."}]})

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's naming
            seen.append({"path": self.path, "headers": dict(self.headers)})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args):
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/search", seen
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def user_tool(tmp_path, monkeypatch, request):
    """A user tool module ('package.module:ClassName'), importable for this test only."""
    # named by the parameter only: a name holding the test's ("..._secret_...") would read as secret itself,
    # and its options would be masked whole, hiding whether each secret-named one is recognised
    module = f"planted_tools_{request.node.callspec.id}"
    (tmp_path / f"{module}.py").write_text(USER_TOOL)
    monkeypatch.syspath_prepend(str(tmp_path))
    return f"{module}:OptionsTool"


def planted_settings(base_url: str, endpoint: str, user_tool: str) -> dict:
    """Settings shared by learn and eval, with every secret but the URL's planted."""
    nested = {"region": "eu", "nested": {"deeper": {"x-api-key": SECRETS["extra_params x-api-key (nested)"]}}}
    web_search = {
        "endpoint": endpoint,
        "api_key": SECRETS["web_search api_key"],
        "extra_params": {
            "format": "json",
            "apiKey": SECRETS["extra_params apiKey (top)"],
            "session_token": SECRETS["extra_params session_token"],
            "client_secret": SECRETS["extra_params client_secret"],
        },
    }
    user_options = {"bing_key": SECRETS["user tool bing_key"], "extra_params": nested}
    return {
        "llm": {"backend": "openai", "model": "m", "base_url": base_url, "api_key": SECRETS["llm api_key"]},
        "agent": {
            "tools": ["web_search", user_tool],
            "protocol": "text",
            "max_turns": 2,
            "tool_options": {"web_search": web_search, user_tool: user_options},
        },
    }


def leaks(root: Path, text: str) -> list[str]:
    """'secret kind in file' for every planted secret found in a file under `root` or in `text`."""
    found = []
    files = [p for p in root.rglob("*") if p.is_file()] if root.exists() else []
    for kind, secret in SECRETS.items():
        found += [f"{kind} in {p.relative_to(root)}" for p in files if secret.encode() in p.read_bytes()]
        if secret in text:
            found.append(f"{kind} in the output or logs")
    return found


def run_and_capture(capsys, caplog, *args: object) -> tuple[int, str]:
    """The exit code of `tfgrpo ARGS`, and all it printed and logged (every logger, from DEBUG up)."""
    caplog.clear()
    with caplog.at_level(logging.DEBUG):
        code = run_cli(*args)
    captured = capsys.readouterr()
    return code, captured.out + captured.err + caplog.text


@pytest.mark.timeout(240)
@pytest.mark.parametrize("command", ["learn", "eval"])
def test_no_planted_secret_reaches_a_file_or_the_output(tmp_path, capsys, caplog, user_tool, command):
    data = write_problems(tmp_path / "problems.jsonl", [(1, 2), (3, 4)])
    out = tmp_path / "run"
    counts = ("--group-size", "2", "--epochs", "1", "--batch-size", "1") if command == "learn" else ("--samples", "2")
    with WorldServer(SearchingWorld()) as server, search_server() as (endpoint, searches):
        config = tmp_path / f"{command}.yaml"
        config.write_text(yaml.safe_dump(planted_settings(server.base_url, endpoint, user_tool)))
        code, output = run_and_capture(
            capsys, caplog, command, "--config", config, "--data", data, "--out", out, *counts
        )
        assert code == 0, output
        assert server.bodies and searches  # the model was asked and the tool searched: the secrets were used

        # credentials in the base URL: refused with the config, in one line naming the URL masked, no request
        before = len(server.bodies)
        with_userinfo = server.base_url.replace("http://", f"http://planted:{SECRETS['base_url userinfo']}@")
        refused_out = tmp_path / "refused"
        started = time.monotonic()
        refused, refusal = run_and_capture(
            capsys, caplog, command, "--config", config, "--data", data, "--out", refused_out, *counts,
            "--base-url", with_userinfo,
        )  # fmt: skip
        assert refused == 2 and time.monotonic() - started < 10 and len(server.bodies) == before, refusal
        (line,) = [line for line in refusal.splitlines() if "base_url" in line]
        assert "http://planted:***@127.0.0.1" in line and "may not carry credentials" in line and "api_key" in line

    search = searches[0]
    assert search["headers"]["Authorization"] == f"Bearer {SECRETS['web_search api_key']}"
    query = parse_qs(urlparse(search["path"]).query)
    for name in ("apiKey", "session_token", "client_secret"):
        assert query[name] == [SECRETS[f"extra_params {name}" + (" (top)" if name == "apiKey" else "")]]
    received = importlib.import_module(user_tool.split(":")[0]).RECEIVED[-1]
    assert received["extra_params"]["nested"]["deeper"]["x-api-key"] == SECRETS["extra_params x-api-key (nested)"]
    assert received["bing_key"] == SECRETS["user tool bing_key"]

    assert leaks(out, output) + leaks(refused_out, refusal) == []
    saved = yaml.safe_load((out / "config.yaml").read_text())
    hidden = {"apiKey": "**********", "session_token": "**********", "client_secret": "**********"}
    assert saved["agent"]["tool_options"]["web_search"]["extra_params"] == {"format": "json", **hidden}
    assert saved["agent"]["tool_options"][user_tool]["bing_key"] == "**********"
