"""One write per response. uvicorn's httptools protocol writes a response's head and its body with two `write` calls;
on a socket with TCP_NODELAY that is two segments sent at once, harmless. But a local replica is reached through
pasta (the sandbox's port forward, apps/runtime/local/sandbox.py), which copies what it receives to a socket of its
own on the host's loopback, and that socket keeps Nagle's algorithm on: the body's segment then waits until the
caller acknowledges the head, and a caller that waits for the whole answer before it sends anything delays that
acknowledgement ~40 ms (Linux's delayed ACK). Measured with keep-alive requests one after another
(bench/serving.py's sequential latency, the portal's replica): 42–44 ms each, against 0.5 ms to a model server
outside the sandbox. So the writes made within one pass of the event loop are joined and go out as one.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class JoinedWrites:
    """A transport whose writes within one pass of the event loop go out in one `write` at the end of the pass;
    everything else is the transport's own. Closing sends what is pending first."""

    __slots__ = ("_loop", "_pending", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(data)

    def flush(self) -> None:
        if not self._pending:
            return
        data = b"".join(self._pending) if len(self._pending) > 1 else self._pending[0]
        self._pending = []
        if not self._transport.is_closing():
            self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class JoinedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol writing each response (head and body, made in the same pass) in one `write`."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(JoinedWrites(transport, self.loop))  # type: ignore[arg-type]
