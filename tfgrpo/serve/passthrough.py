"""A streamed upstream reply copied to the client chunk by chunk, as a bare ASGI response.

Why not Starlette's StreamingResponse: under uvicorn (ASGI spec 2.3) it runs every stream inside an
anyio task group with a second task listening for the client's disconnect; that cost more CPU per
streamed request than the rest of the proxy's own work (py-spy, benchmarks/serve.py). Here one pending
`receive()` plays that listener: checked between chunks, it stops the copy once the client hung up.

Nothing here grows with the stream: at most `max_bytes` are passed on (then the client gets an error event
and `data: [DONE]`), and what the trace keeps of the text is `StreamText`'s bounded share. A stream ended
early says why to `on_end`: `upstream_reply_too_large`, `upstream_broke_off`, or `cut_by_shutdown` (the
server stopped and its graceful-shutdown time ran out: uvicorn cancels the request; the client gets an error
event saying so, without `[DONE]`, where its connection still takes it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any

import aiohttp

from tfgrpo.serve.errors import error_payload
from tfgrpo.serve.replies import StreamText

#: called once the stream ended, however it ended: (status to trace, why it was cut or None, its text)
OnEnd = Callable[[int, str | None, StreamText], None]
TOO_LARGE = "upstream_reply_too_large"
BROKE_OFF = "upstream_broke_off"
SHUTDOWN = "cut_by_shutdown"
#: the status a stream is traced and logged with when it was cut, by why
CUT_STATUS = {TOO_LARGE: 502, BROKE_OFF: 502, SHUTDOWN: 503}


class SSEPassthrough:
    def __init__(
        self,
        upstream: aiohttp.ClientResponse,
        headers: dict[str, str],
        on_end: OnEnd,
        *,
        max_bytes: int,
        max_trace_chars: int,
    ):
        self.upstream = upstream
        media_type = upstream.headers.get("content-type", "text/event-stream")
        self.raw_headers = [(b"content-type", media_type.encode("latin-1"))] + [
            (key.encode("latin-1"), value.encode("latin-1")) for key, value in headers.items()
        ]
        self.on_end = on_end
        self.max_bytes = max_bytes
        self.text = StreamText(max_trace_chars)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        # The body was read already: the next message is http.disconnect, when the client hangs up
        # (or after the response completed).
        hung_up = asyncio.ensure_future(receive())
        cut: str | None = None
        try:
            await send({"type": "http.response.start", "status": self.upstream.status, "headers": self.raw_headers})
            try:
                cut = await self._copy(send, hung_up)
            except (aiohttp.ClientError, asyncio.TimeoutError):
                cut = BROKE_OFF  # the client sees a stream without [DONE]
            if cut != "hung_up":
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            cut = SHUTDOWN  # uvicorn cancels what still runs once the graceful-shutdown time is up
            await self._say_cut(send)
            raise
        finally:  # also when the client hangs up mid-stream: what it was sent is traced
            hung_up.cancel()
            reason = cut if cut in CUT_STATUS else None
            if reason is None:
                self.upstream.release()
            else:  # its connection holds an unread rest: never back into the pool
                self.upstream.close()
            self.on_end(CUT_STATUS[reason] if reason else self.upstream.status, reason, self.text)

    async def _say_cut(self, send: Any) -> None:
        """Tell the client the stream ends here for the shutdown (an error event, no [DONE]), if its connection
        still takes bytes; never waits past a second (a client that reads nothing must not delay the exit)."""
        message = "the server is shutting down: this stream was cut before its end (retry the request)"
        event = json.dumps(error_payload(503, message, SHUTDOWN))
        chunk = {"type": "http.response.body", "body": f"\n\ndata: {event}\n\n".encode(), "more_body": False}
        with contextlib.suppress(Exception):
            await asyncio.wait_for(send(chunk), timeout=1.0)

    async def _copy(self, send: Any, hung_up: asyncio.Future[Any]) -> str | None:
        """Copy until the upstream's end; "hung_up" when the client left, TOO_LARGE at `max_bytes`."""
        passed, last = 0, b"\n\n"
        async for chunk in self.upstream.content.iter_any():
            passed += len(chunk)
            if passed > self.max_bytes:
                await send({"type": "http.response.body", "body": self._too_large(last), "more_body": True})
                return TOO_LARGE
            self.text.feed(chunk)
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            last = chunk
            if hung_up.done():
                return "hung_up"
        return None

    def _too_large(self, last: bytes) -> bytes:
        """The error event (after a blank line ending any event left open) and `data: [DONE]`."""
        message = f"the upstream's stream passed {self.max_bytes} bytes (max_stream_bytes) and was cut here"
        event = json.dumps(error_payload(502, message, TOO_LARGE))
        opening = b"" if last.endswith(b"\n\n") else b"\n\n"
        return opening + f"data: {event}\n\ndata: [DONE]\n\n".encode()
