"""A streamed upstream reply copied to the client chunk by chunk, as a bare ASGI response.

Why not Starlette's StreamingResponse: under uvicorn (ASGI spec 2.3) it runs every stream inside an
anyio task group with a second task listening for the client's disconnect; that cost more CPU per
streamed request than the rest of the proxy's own work (py-spy, benchmarks/serve.py). Here one pending
`receive()` plays that listener: checked between chunks, it stops the copy once the client hung up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp

#: called once the stream ended, however it ended: (status to trace, the bytes the client was sent)
OnEnd = Callable[[int, bytes], None]


class SSEPassthrough:
    def __init__(self, upstream: aiohttp.ClientResponse, headers: dict[str, str], on_end: OnEnd):
        self.upstream = upstream
        media_type = upstream.headers.get("content-type", "text/event-stream")
        self.raw_headers = [(b"content-type", media_type.encode("latin-1"))] + [
            (key.encode("latin-1"), value.encode("latin-1")) for key, value in headers.items()
        ]
        self.on_end = on_end

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        # The body was read already: the next message is http.disconnect, when the client hangs up
        # (or after the response completed).
        hung_up = asyncio.ensure_future(receive())
        status, sent = self.upstream.status, []
        try:
            await send({"type": "http.response.start", "status": status, "headers": self.raw_headers})
            try:
                async for chunk in self.upstream.content.iter_any():
                    sent.append(chunk)
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    if hung_up.done():
                        return
            except (aiohttp.ClientError, asyncio.TimeoutError):
                status = 502  # the upstream broke off mid-stream: the client sees a stream without [DONE]
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:  # also when the client hangs up mid-stream: what it was sent is traced
            hung_up.cancel()
            self.upstream.release()
            self.on_end(status, b"".join(sent))
