"""No credential given to `tfgrpo learn` or `tfgrpo eval` reaches a file of the run or a line of its output.

A real run of each, through the openai backend against the scripted world server, with one distinct
secret of every kind planted: the LLM's API key, a web_search tool's API key and secret-named extra
query parameters (a key, a token and a secret; used for real: the tool is called and its search server
records them), a secret-named option nested three levels deep in a user tool's options and a `bing_key`
one at its top (a `*_key` of no known owner: issue 27), three base URLs whose query strings authenticate
(an Azure Functions `?code=`, a SAS `?sig=`, a bare `?token`: sent with every request, issue 43), and
userinfo in a base URL (refused at config time, in one line, before any request). Then every byte of
every file under the run directory, and everything printed or logged, is searched for each secret.
`tfgrpo serve` gets the same query-string upstreams: its trace store, log and startup line are searched.
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
import yaml

from tests.helpers.cli import run_cli
from tests.helpers.learn_world import World, WorldServer, write_problems
from tests.helpers.serve_fixtures import write_library
from tests.helpers.serve_upstream import ScriptedUpstream, running, serve_cli
from tests.helpers.servers import free_port
from tfgrpo.serve.traces import TraceStore

SECRETS = {
    "llm api_key": "sk-llm-PLANTED-1a9f",
    "web_search api_key": "tool-key-PLANTED-4d2e",
    "extra_params apiKey (top)": "xp-top-PLANTED-2b7c",
    "extra_params x-api-key (nested)": "xp-nested-PLANTED-3c5d",
    "extra_params session_token": "xp-token-PLANTED-6f1b",
    "extra_params client_secret": "xp-secret-PLANTED-7a4c",
    "user tool bing_key": "bing-key-PLANTED-8d3e",
    "base_url userinfo": "url-pass-PLANTED-5e8a",
    "base_url ?code= (Azure Functions)": "fn-code-PLANTED-9c1d",
    "base_url ?sig= (SAS)": "sas-sig-PLANTED-4e7f",
    "base_url bare ?token": "sk-bare-PLANTED-2a6b",
    "web_search endpoint ?tenant=": "tenant-PLANTED-0f3a",
}
#: (path, query) of each replica: the query string is how these services authenticate
QUERY_REPLICAS = [
    ("/v1", f"code={SECRETS['base_url ?code= (Azure Functions)']}"),
    ("/fn/v1", f"sv=2022-11-02&sig={SECRETS['base_url ?sig= (SAS)']}"),
    ("/bare/v1", SECRETS["base_url bare ?token"]),
]
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


def query_urls(origin: str) -> list[str]:
    """The replicas' base URLs on `origin` (http://HOST:PORT), each with its query string."""
    return [f"{origin}{path}?{query}" for path, query in QUERY_REPLICAS]


class RecordingWorldServer(WorldServer):
    """The world server, keeping the path and query string of every request (`paths`)."""

    def __init__(self, world: World, **options):
        super().__init__(world, **options)
        self.paths: list[str] = []

    def _handler(self):
        server, handler = self, super()._handler()

        class Recording(handler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                server.paths.append(self.path)
                super().do_POST()

        return Recording

    @property
    def origin(self) -> str:
        return self.base_url.removesuffix("/v1")


def assert_sent_with_their_queries(paths: list[str], *, every_replica: bool) -> None:
    """Every request went to a replica's path with that replica's query string after it, in clear (a bare
    token is sent as `token=`: the openai SDK takes the query as parameters)."""
    sent = {f"{path}/chat/completions?{query}" for path, query in QUERY_REPLICAS}
    sent |= {f"{path}/chat/completions?{query}=" for path, query in QUERY_REPLICAS if "=" not in query}
    assert paths and set(paths) <= sent, set(paths) - sent
    if every_replica:
        assert {path.split("/chat/")[0] for path in paths} == {path for path, _ in QUERY_REPLICAS}, set(paths)


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


def planted_settings(base_url: str | list[str], endpoint: str, user_tool: str) -> dict:
    """Settings shared by learn and eval, with every secret but the URL userinfo planted."""
    nested = {"region": "eu", "nested": {"deeper": {"x-api-key": SECRETS["extra_params x-api-key (nested)"]}}}
    web_search = {
        "endpoint": f"{endpoint}?tenant={SECRETS['web_search endpoint ?tenant=']}",
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
    counts = ("--group-size", "2", "--epochs", "1", "--batch-size", "2") if command == "learn" else ("--samples", "2")
    # a delay, so requests overlap and least-busy routing sends some to every replica
    with RecordingWorldServer(SearchingWorld(), delay_s=0.05) as server, search_server() as (endpoint, searches):
        config = tmp_path / f"{command}.yaml"
        config.write_text(yaml.safe_dump(planted_settings(query_urls(server.origin), endpoint, user_tool)))
        code, output = run_and_capture(
            capsys, caplog, command, "--config", config, "--data", data, "--out", out, *counts
        )
        assert code == 0, output
        assert server.bodies and searches  # the model was asked and the tool searched: the secrets were used
        assert_sent_with_their_queries(server.paths, every_replica=True)

        # credentials in the base URL: refused with the config, in one line naming the URL masked, no request
        before = len(server.bodies)
        with_userinfo = server.base_url.replace("http://", f"http://planted:{SECRETS['base_url userinfo']}@")
        refused_out = tmp_path / "refused"
        started = time.monotonic()
        refused, refusal = run_and_capture(
            capsys, caplog, command, "--config", config, "--data", data, "--out", refused_out, *counts,
            "--base-url", with_userinfo, "--base-url", query_urls(server.origin)[0],
        )  # fmt: skip
        assert refused == 2 and time.monotonic() - started < 10 and len(server.bodies) == before, refusal
        (line,) = [line for line in refusal.splitlines() if "base_url" in line]
        assert "http://planted:***@127.0.0.1" in line and "may not carry credentials" in line and "api_key" in line

    search = searches[0]
    assert search["headers"]["Authorization"] == f"Bearer {SECRETS['web_search api_key']}"
    query = parse_qs(urlparse(search["path"]).query)
    assert query["tenant"] == [SECRETS["web_search endpoint ?tenant="]]  # the endpoint's own query, sent too
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


@pytest.mark.timeout(120)
def test_a_query_string_reaches_no_error_line_and_a_saved_one_is_never_sent_masked(tmp_path, capsys, caplog):
    """A replica that cannot be reached, and a URL refused for its scheme (issue 43: `?code=` was in that
    error line in clear); then `--resume` from the run's config.yaml, which holds the URL as `?***`: refused
    in one line, never sent."""
    data = write_problems(tmp_path / "problems.jsonl", [(1, 2)])
    out = tmp_path / "run"
    dead = f"http://127.0.0.1:{free_port()}"
    config = tmp_path / "learn.yaml"
    llm = {"backend": "openai", "model": "m", "api_key": "k", "max_retries": 0, "base_url": query_urls(dead)[0]}
    config.write_text(yaml.safe_dump({"llm": llm}))
    failed, failure = run_and_capture(
        capsys, caplog, "learn", "--config", config, "--data", data, "--out", out, "--group-size", "2"
    )
    assert failed != 0 and "Traceback" not in failure, failure
    typo = query_urls(dead)[0].replace("http://", "htp://")
    refused, refusal = run_and_capture(capsys, caplog, "learn", "--config", config, "--data", data, "--base-url", typo)
    (line,) = [line for line in refusal.splitlines() if "error" in line]
    assert refused == 2 and "htp://127.0.0.1" in line and "/v1?***' is not an http(s) URL" in line, line
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["llm"]["base_url"] == [f"{dead}/v1?***"]

    resumed, resumption = run_and_capture(capsys, caplog, "learn", "--out", out, "--resume")
    (said,) = [line for line in resumption.splitlines() if "error" in line]
    assert resumed == 2 and "query string is the mask a saved config.yaml writes" in said and "--base-url" in said
    assert leaks(out, failure + refusal + resumption) == []


@pytest.mark.timeout(180)
def test_serve_traces_and_announces_query_string_upstreams_masked(tmp_path):
    """`tfgrpo serve --upstream URL?code=...` (three replicas): each request goes to the replica's path with
    its query string in clear; the trace store, the log and the "serving" line hold it only as `?***`
    (issue 43: traces.sqlite's `upstream` and the startup line held it in clear)."""
    seen: list[str] = []
    scripted = ScriptedUpstream(latency_s=0.2)  # slow, so concurrent requests reach every replica

    async def recording(scope, receive, send):
        if scope["type"] == "http":
            seen.append(f"{scope['path']}?{scope['query_string'].decode()}")
        await scripted(scope, receive, send)

    library = write_library(tmp_path / "library.json")
    log, traces = tmp_path / "serve.log", tmp_path / "traces.sqlite"
    with running(recording) as origin:
        upstreams = [item for url in query_urls(origin) for item in ("--upstream", url)]
        with serve_cli(log, "--library", str(library), *upstreams, "--traces", str(traces)) as base:
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            with ThreadPoolExecutor(6) as pool:
                replies = list(pool.map(lambda _: httpx.post(f"{base}/v1/chat/completions", json=body), range(6)))
            assert [reply.status_code for reply in replies] == [200] * 6
    chats = [path for path in seen if "/chat/completions" in path]
    assert_sent_with_their_queries(chats, every_replica=True)
    (serving,) = [line for line in log.read_text().splitlines() if "serving library" in line]
    assert ", ".join(f"{origin}{path}?***" for path, _ in QUERY_REPLICAS) in serving, serving
    store = TraceStore(traces)
    assert {row["upstream"] for row in store.exchanges()} <= {f"{origin}{path}?***" for path, _ in QUERY_REPLICAS}
    store.close()
    assert leaks(tmp_path, "") == []
