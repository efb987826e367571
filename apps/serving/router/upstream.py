"""HTTP/1.1 to the replicas: keep-alive connection pools over asyncio, responses parsed by httptools.

Why not httpx or aiohttp: the router adds a hop to every inference request, so its client's cost per request
is the router's cost. Measured on the 2-core benchmark machine (docs/serving-router.md, one model-server
replica, 64 concurrent callers through the router): this module ~2.6× httpx's throughput and ~1.4×
aiohttp's, with a lower p99 than either. It is small because it needs little: the peer is a replica the
portal started, requests are buffered whole (the caller holds the body anyway, for a retry or a shadow copy),
responses come back framed by Content-Length or chunked (httptools decodes both) and are streamed to the
caller in the pieces they arrive in, with reading paused past `HIGH_WATER` buffered bytes.

TCP_NODELAY is set on every connection (asyncio and uvloop set it too; set again so that no platform leaves
Nagle on: a keep-alive request would then wait ~40 ms for the peer's delayed ACK, uvicorn#3149).

An idle connection is kept `keepalive` seconds, below uvicorn's 5 s server-side timeout, so the router
rarely writes into a connection the replica is closing; when it does, the request fails before any byte of
an answer and `UpstreamError.retryable` says the caller may send it elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections import deque
from collections.abc import AsyncIterator

import httptools

HIGH_WATER = 1 << 20  # response bytes buffered before reading from the replica pauses
LOW_WATER = HIGH_WATER // 4
MAX_IDLE = 512  # idle connections kept per replica
COALESCE_BELOW = 64 * 1024  # a body this small is sent in the same write as the request head


class UpstreamError(Exception):
    """The replica could not be reached or broke the exchange. `retryable`: no byte of an answer came back
    (refused, reset or closed first), so the request can be sent again; `refused`: not even a connection (the
    replica is down, not merely closing an idle connection)."""

    def __init__(self, message: str, *, retryable: bool, refused: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.refused = refused


class UpstreamTimeout(UpstreamError):
    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


class _Connection(asyncio.Protocol):
    """One connection to a replica and the response being read on it."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.loop = pool.loop
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.lost = False
        self.reused = False
        self.in_use = False  # a request is on it (an idle connection that closes fails nobody)
        self.idle_since = 0.0
        self._start()

    def _start(self) -> None:
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.done = False
        self.keep_alive = False
        self.answered = False  # a byte of the response arrived
        self.error: UpstreamError | None = None
        self.headers_ready: asyncio.Future[None] = self.loop.create_future()
        self.body_waiter: asyncio.Future[None] | None = None
        self.paused = False

    # --- asyncio.Protocol ----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError, AttributeError):  # not a TCP socket
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.answered = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(
                UpstreamError("the replica switched protocols, which the router does not relay", retryable=False)
            )
        except httptools.HttpParserError as exc:
            self._fail(UpstreamError(f"the replica sent a malformed response: {exc}", retryable=False))

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if not self.done:
            reason = f": {exc}" if exc else ""
            self._fail(UpstreamError(f"the replica closed the connection{reason}", retryable=not self.answered))

    def pause_writing(self) -> None:  # pragma: no cover - bodies are small; asyncio buffers the rest
        pass

    def resume_writing(self) -> None:  # pragma: no cover
        pass

    # --- httptools callbacks -------------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        if not self.headers_ready.done():
            self.headers_ready.set_result(None)

    def on_body(self, body: bytes) -> None:
        self.chunks.append(bytes(body))
        self.buffered += len(body)
        if self.buffered > HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        self.done = True
        self.keep_alive = self.parser.should_keep_alive()
        self._wake()

    # --- the caller's side ---------------------------------------------------------------------------

    def _wake(self) -> None:
        waiter = self.body_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, error: UpstreamError) -> None:
        if self.error is None:
            self.error = error
        if self.in_use:
            for waiter in (self.headers_ready, self.body_waiter):
                if waiter is not None and not waiter.done():
                    waiter.set_exception(error)
                    waiter.exception()  # retrieved: whoever awaits it still gets it; nobody else must log it
        if self.transport is not None:
            self.transport.close()

    def close(self) -> None:
        self.lost = True
        if self.transport is not None:
            self.transport.close()

    async def _wait(self, waiter: asyncio.Future[None], timeout: float) -> None:
        # A timer, not asyncio.wait_for: no extra task per request.
        timer = self.loop.call_later(timeout, self._fail, UpstreamTimeout(f"no answer within {timeout:g} s"))
        try:
            await waiter
        finally:
            timer.cancel()

    async def next_chunk(self, timeout: float) -> bytes | None:
        """The next piece of the response body; None at its end (the connection then goes back to the pool)."""
        while not self.chunks and not self.done:
            if self.error is not None:
                raise self.error
            self.body_waiter = self.loop.create_future()
            await self._wait(self.body_waiter, timeout)
            self.body_waiter = None
        if self.chunks:
            chunk = self.chunks.popleft()
            self.buffered -= len(chunk)
            if self.paused and self.buffered < LOW_WATER and self.transport is not None:
                self.paused = False
                self.transport.resume_reading()
            return chunk
        self.pool.release(self)
        return None

    def take_body(self) -> bytes | None:
        """The whole body if it has already arrived (the usual case for an inference answer), else None."""
        if not self.done:
            return None
        body = b"".join(self.chunks) if len(self.chunks) != 1 else self.chunks[0]
        self.chunks.clear()
        self.buffered = 0
        self.pool.release(self)
        return body


class Response:
    """A response whose head has arrived; read the body with `read()` (whole) or `chunks()` (streamed)."""

    __slots__ = ("_conn", "_timeout", "headers", "status")

    def __init__(self, conn: _Connection, timeout: float) -> None:
        self._conn = conn
        self._timeout = timeout
        self.status = conn.status
        self.headers = conn.headers

    def take_body(self) -> bytes | None:
        return self._conn.take_body()

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            while (chunk := await self._conn.next_chunk(self._timeout)) is not None:
                yield chunk
        except BaseException:
            self._conn.close()
            raise

    async def read(self) -> bytes:
        body = self.take_body()
        if body is not None:
            return body
        return b"".join([chunk async for chunk in self.chunks()])


class Pool:
    """Keep-alive connections to one replica (`host`, `port`) on one event loop."""

    def __init__(self, host: str, port: int, *, keepalive: float = 4.0, connect_timeout: float = 2.0) -> None:
        self.loop = asyncio.get_running_loop()
        self.host, self.port = host, port
        self.keepalive = keepalive
        self.connect_timeout = connect_timeout
        self.idle: list[_Connection] = []
        self.host_header = f"{host}:{port}".encode()

    def release(self, conn: _Connection) -> None:
        conn.in_use = False
        if conn.lost or not conn.keep_alive or len(self.idle) >= MAX_IDLE:
            conn.close()
            return
        conn._start()
        conn.reused = True
        conn.idle_since = time.monotonic()
        self.idle.append(conn)

    def close(self) -> None:
        while self.idle:
            self.idle.pop().close()

    async def _connection(self) -> _Connection:
        now = time.monotonic()
        while self.idle:
            conn = self.idle.pop()  # the most recently used: least likely to be closing
            if not conn.lost and now - conn.idle_since < self.keepalive:
                return conn
            conn.close()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await self.loop.create_connection(lambda: _Connection(self), self.host, self.port)
        except TimeoutError:
            raise UpstreamError(
                f"no connection within {self.connect_timeout:g} s", retryable=True, refused=True
            ) from None
        except OSError as exc:
            raise UpstreamError(f"cannot connect: {exc.strerror or exc}", retryable=True, refused=True) from None
        return conn

    async def request(
        self, method: str, target: bytes, headers: list[tuple[bytes, bytes]], body: bytes, timeout: float
    ) -> Response:
        """Send a request and wait for the response head. Raises UpstreamError."""
        conn = await self._connection()
        head = [method.encode(), b" ", target, b" HTTP/1.1\r\nhost: ", self.host_header, b"\r\n"]
        for name, value in headers:
            head += (name, b": ", value, b"\r\n")
        if body or method not in ("GET", "HEAD", "OPTIONS", "DELETE"):
            head += (b"content-length: ", str(len(body)).encode(), b"\r\n")
        head.append(b"\r\n")
        transport = conn.transport
        assert transport is not None
        conn.in_use = True
        if len(body) < COALESCE_BELOW:
            head.append(body)
            transport.write(b"".join(head))
        else:
            transport.write(b"".join(head))
            transport.write(body)
        try:
            await conn._wait(conn.headers_ready, timeout)
        except BaseException:
            conn.close()
            raise
        if method == "HEAD":  # the parser cannot know a HEAD answer has no body: never reuse this connection
            conn.done, conn.keep_alive = True, False
        return Response(conn, timeout)
