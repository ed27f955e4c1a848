"""`tfgrpo mcp`: a library served to MCP clients (Claude Code, Codex, Cursor, any MCP host).

Built on the official MCP Python SDK (`mcp` on PyPI, `MCPServer`), chosen over fastmcp by measurement
(docs/agents.md: half the installed weight, fewer packages, a faster import; fastmcp depends on `mcp`
itself). What it offers:

    relevant_experiences(task, k)   the k lessons nearest to a task description (serve's top-k index)
    list_experiences()              the whole library, with ids and measured credit
    record_outcome(...)             with --traces: an outcome stored where `learn --from-traces` reads it
    tfgrpo://library.json, tfgrpo://library.md   the library as resources (the file; the rendered lines)

Transports: stdio (the client starts the command) and streamable HTTP at /mcp (stateless, JSON replies).
On HTTP, `--client-keys` is checked before the SDK sees a request, by serve's own `ClientKeys` (only key
hashes in memory, none ever logged): the SDK's own auth is an OAuth resource server that needs an
authorization server, which a static key file is not. The library file is watched as `serve` watches it
(`LiveLibrary`): a changed file is embedded, then served, and a broken one keeps the old version serving.
Over stdio, stdout is the protocol channel: everything the start-up prints goes to stderr.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from tfgrpo.experiences.export import export_text
from tfgrpo.serve.auth import ClientKeys
from tfgrpo.serve.errors import RequestRejected, error_payload
from tfgrpo.serve.live_library import LiveLibrary
from tfgrpo.serve.mcp_config import McpConfig
from tfgrpo.serve.mcp_library import InputRefused, LibraryTools
from tfgrpo.serve.traces import TraceStore

PATH = "/mcp"
#: where the HTTP key check leaves the client's identity (its key's sha256) for the tools to read
IDENTITY = "tfgrpo_client"
INSTRUCTIONS = (
    "Lessons learned for a task by Training-Free GRPO. Before working on such a task, call relevant_experiences "
    "with its description and apply the lessons that fit; after, if record_outcome is offered, report how it went."
)


def build_server(tools: LibraryTools) -> MCPServer:
    """The MCP server over `tools`: its tools and resources (record_outcome only with a trace store)."""
    server: MCPServer = MCPServer("tfgrpo", instructions=INSTRUCTIONS, log_level="WARNING")

    @server.tool(description="The experiences (lessons) most relevant to a task description, with ids and credit.")
    def relevant_experiences(
        task: Annotated[str, Field(description="What you are about to work on, in a sentence or a paragraph.")],
        k: Annotated[int | None, Field(description="How many experiences (default: the server's).")] = None,
    ) -> dict[str, Any]:
        return _refused_as_tool_error(lambda: tools.relevant(task, k))

    @server.tool(description="Every experience of the library, with its id and measured credit.")
    def list_experiences() -> dict[str, Any]:
        return tools.listing()

    if tools.traces is not None:

        @server.tool(
            description="Record how a task went with the experiences you applied, for the library to learn from. "
            "Give the gold answer when you know it: `tfgrpo learn --from-traces` learns from those."
        )
        async def record_outcome(
            task: Annotated[str, Field(description="The task description, as given to relevant_experiences.")],
            experience_ids: Annotated[list[str], Field(description="Ids of the experiences you applied.")],
            reward: Annotated[float, Field(description="How well it went, in the server's reward range.")],
            context: Context,
            answer: Annotated[str | None, Field(description="Your final answer or result.")] = None,
            gold: Annotated[str | None, Field(description="The correct answer, when known.")] = None,
        ) -> dict[str, Any]:
            owner = _identity(context)
            row = _refused_as_tool_error(
                lambda: tools.queue_outcome(task, experience_ids, reward, answer=answer, gold=gold, owner=owner)
            )
            return await anyio.to_thread.run_sync(
                lambda: _refused_as_tool_error(lambda: tools.record_feedback(row, reward, gold))
            )

    @server.resource("tfgrpo://library.json", name="library", mime_type="application/json")
    def library_json() -> str:
        return tools.live.current.library.to_json()

    @server.resource("tfgrpo://library.md", name="library-markdown", mime_type="text/markdown")
    def library_markdown() -> str:
        return export_text(tools.live.current.library, "md")

    return server


def open_tools(config: McpConfig) -> LibraryTools:
    """The library loaded and embedded, and the trace store opened (the slow part of the start)."""
    live = LiveLibrary(config.library, store_dir=config.store_dir, topk_index=True)
    traces = TraceStore(config.traces) if config.traces else None
    return LibraryTools(config, live, traces)


def run(config: McpConfig, announce: Callable[[str], None]) -> None:
    keys = ClientKeys.load(config.client_keys) if config.client_keys else None  # before the slow part
    with contextlib.redirect_stdout(sys.stderr):  # a model's loading chatter must not reach the stdio channel
        tools = open_tools(config)
    library = tools.live.current.library
    where = "stdio" if config.transport == "stdio" else f"http://{config.host}:{config.port}{PATH}"
    announce(f"tfgrpo mcp: {config.library} ({len(library)} experiences, version {library.version}) on {where}")
    try:
        anyio.run(_serve, config, tools, keys)
    finally:
        if tools.traces is not None:
            tools.traces.close()


async def _serve(config: McpConfig, tools: LibraryTools, keys: ClientKeys | None) -> None:
    server = build_server(tools)
    async with anyio.create_task_group() as group:
        group.start_soon(tools.live.watch, config.reload_interval_s)
        if config.transport == "stdio":
            await server.run_stdio_async()
        else:
            await _serve_http(server, config, keys)
        group.cancel_scope.cancel()


async def _serve_http(server: MCPServer, config: McpConfig, keys: ClientKeys | None) -> None:
    import uvicorn

    app = server.streamable_http_app(
        streamable_http_path=PATH,
        stateless_http=True,
        json_response=True,
        max_request_body_size=config.max_request_bytes,
        host=config.host,
    )
    guarded = app if keys is None else KeyCheck(app, keys)
    settings = uvicorn.Config(guarded, host=config.host, port=config.port, log_level="warning", access_log=False)
    await uvicorn.Server(settings).serve()


class KeyCheck:
    """ASGI middleware: an HTTP request without a known `Authorization: Bearer KEY` gets 401 and goes no further."""

    def __init__(self, app: Any, keys: ClientKeys):
        self.app = app
        self.keys = keys

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        authorization = dict(scope["headers"]).get(b"authorization")
        try:
            identity = self.keys.check(authorization)
        except RequestRejected as rejected:
            body = json.dumps(error_payload(rejected.status, str(rejected), rejected.code)).encode()
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            headers += [(name.encode(), value.encode()) for name, value in rejected.headers.items()]
            await send({"type": "http.response.start", "status": rejected.status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        scope.setdefault("state", {})[IDENTITY] = identity
        await self.app(scope, receive, send)


def _identity(context: Context) -> str | None:
    """The client key's identity of this request (None over stdio or without keys)."""
    request = context.request_context.request
    state = getattr(request, "scope", {}).get("state", {}) if request is not None else {}
    return state.get(IDENTITY)


def _refused_as_tool_error(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except InputRefused as refused:
        raise ToolError(str(refused)) from None
