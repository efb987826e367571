"""Chunk uploads without the spool: `PATCH /api/v1/dataset-upload-files/<id>/` reads its body while it arrives.

Django's `ASGIHandler` receives a whole request body into a temporary file (on disk past 2.5 MB) before the
view runs, so every uploaded byte was written twice. `ChunkUploadRoute` wraps the project's HTTP application
and sends exactly that route's PATCH requests to `StreamingBodyHandler`: the same Django handler, middleware
stack and DRF view (`UploadFileViewSet.partial_update`, so authentication, token scope, the tenant queryset
and the project permission are the ones every other request goes through), except that the body is a
`RequestBodyStream` fed by the `http.request` messages as they come. The view writes them straight into the
partial file while hashing them: one write per byte, memory bounded by `BUFFER_BYTES` per request.

Every other request, and the GET/HEAD/DELETE of the same route, go to the wrapped application unchanged.

`tune_malloc()`: uvicorn hands the body over in fresh 64–300 KiB `bytes`. With glibc's defaults each one is
mmap'ed or grows the heap and is given back to the kernel when freed, so every received byte also costs a
page fault: uvicorn alone received 0.75 GiB/s on loopback, 1.6–3.6 GiB/s with the heap kept (measured on the
benchmark machine). Skipped when the operator tunes malloc through the environment.
"""

from __future__ import annotations

import asyncio
import contextvars
import ctypes
import functools
import logging
import os
import sys
import threading
from collections import deque
from typing import Any

from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, ASGIRequest
from django.urls import Resolver404, get_resolver, get_script_prefix, reverse

logger = logging.getLogger(__name__)

CHUNK_ROUTE = "api:datasetuploadfile-detail"  # UploadFileViewSet's detail route
BUFFER_BYTES = 4 * 1024 * 1024  # received but not yet written, per request: the network waits beyond this

# mallopt(3) parameters and the values set: blocks up to 4 MiB come from the heap, and up to 32 MiB of free
# heap top is kept for the next request instead of being returned (and faulted in again) at once.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
TRIM_THRESHOLD_BYTES = 32 * 1024 * 1024
MMAP_THRESHOLD_BYTES = 4 * 1024 * 1024


def tune_malloc() -> bool:
    """Keep glibc from returning and re-faulting the heap between received blocks; True if applied."""
    tuned_by_operator = any(k.startswith("MALLOC_") or k == "GLIBC_TUNABLES" for k in os.environ)
    if tuned_by_operator or not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # glibc only (musl has none)
    except (AttributeError, OSError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    ok = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
    if not ok:  # pragma: no cover - glibc accepts these values
        logger.warning("mallopt refused the upload buffer settings")
    return ok


class ClientDisconnected(OSError):
    """The connection closed before the body arrived whole (Django's `read()` re-raises it as
    `UnreadablePostError`)."""


class RequestBodyStream:
    """A file-like request body that a sync view reads while the event loop is still receiving it.

    The event loop side (`pump`) appends `http.request` bodies; the view's thread (`read`) takes them. Bytes
    objects are handed over as they are (no copy, no join) unless a read asks for less than one holds. A
    disconnect, or a body that stops arriving for `ASGIRequest.body_receive_timeout` (60 s), makes `read`
    raise `ClientDisconnected`.
    """

    def __init__(self, receive: Any, limit: int = BUFFER_BYTES, idle_timeout: float | None = None) -> None:
        self._receive = receive
        self._limit = limit
        self._idle_timeout = ASGIRequest.body_receive_timeout if idle_timeout is None else idle_timeout
        self._loop = asyncio.get_running_loop()
        self._blocks: deque[bytes] = deque()
        self._buffered = 0
        self._done = False
        self._aborted = False
        self._closed = False
        self._cond = threading.Condition()
        self._reader_waiting = False
        self._space = asyncio.Event()
        self._pump_waiting = False

    # --- event loop side ---------------------------------------------------------------------------

    async def pump(self) -> None:
        """Receive the body into the buffer (bounded), then wait for the disconnect like Django does."""
        try:
            # A client that stalls mid-chunk must not hold the partial file's lock for hours; time spent
            # waiting for the view to catch up does not count.
            async with asyncio.timeout(None) as deadline:
                while True:
                    await self._room()
                    deadline.reschedule(self._loop.time() + self._idle_timeout)
                    message = await self._receive()
                    deadline.reschedule(None)
                    if message["type"] == "http.disconnect":
                        raise RequestAborted()
                    if not self._put(message.get("body", b""), message.get("more_body", False)):
                        break
        except TimeoutError:
            self._abort()
            raise RequestAborted() from None
        except BaseException:  # a disconnect, or the request task was cancelled: the reader must not hang
            self._abort()
            raise
        message = await self._receive()
        if message["type"] == "http.disconnect":
            raise RequestAborted()
        raise AssertionError(f"Invalid ASGI message after request body: {message['type']}")

    async def _room(self) -> None:
        while True:
            with self._cond:
                if self._buffered < self._limit or self._closed:
                    self._pump_waiting = False
                    return
                self._pump_waiting = True
                self._space.clear()
            await self._space.wait()

    def _put(self, body: bytes, more: bool) -> bool:
        with self._cond:
            if body and not self._closed:
                self._blocks.append(body)
                self._buffered += len(body)
            if not more:
                self._done = True
            if self._reader_waiting:
                self._cond.notify()
        return more

    def _abort(self) -> None:
        with self._cond:
            self._aborted = True
            self._blocks.clear()
            self._buffered = 0
            self._cond.notify_all()

    # --- the view's thread -------------------------------------------------------------------------

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            return b"".join(iter(lambda: self.read(1 << 20), b""))
        if size == 0:
            return b""
        with self._cond:
            while not self._blocks and not self._done and not self._aborted:
                self._reader_waiting = True
                self._cond.wait()
                self._reader_waiting = False
            if self._aborted:
                raise ClientDisconnected("The client closed the connection before the whole body arrived.")
            if not self._blocks:
                return b""
            block = self._blocks.popleft()
            if len(block) > size:
                self._blocks.appendleft(block[size:])
                block = block[:size]
            self._buffered -= len(block)
            if self._pump_waiting and self._buffered < self._limit:
                self._pump_waiting = False
                self._loop.call_soon_threadsafe(self._space.set)
        return block

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._blocks.clear()
            self._buffered = 0
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._space.set)

    def seek(self, *args: Any) -> int:  # Django calls nothing else; a stream cannot rewind
        raise OSError("The request body is a stream.")


_body: contextvars.ContextVar[RequestBodyStream | None] = contextvars.ContextVar("chunk_body", default=None)


class StreamingBodyHandler(ASGIHandler):
    """Django's ASGI handler with a streamed body: the view runs as soon as the headers are in."""

    async def read_body(self, receive: Any) -> RequestBodyStream:
        body = RequestBodyStream(receive)
        _body.set(body)  # the disconnect listener, a task created later in handle(), sees it
        return body

    async def listen_for_disconnect(self, receive: Any) -> None:
        body = _body.get()
        if body is None:  # pragma: no cover - read_body always runs first
            await super().listen_for_disconnect(receive)
            return
        await body.pump()


@functools.cache
def _chunk_prefix() -> str:
    """`/api/v1/dataset-upload-files/`: every path of the route starts with it."""
    url = reverse(CHUNK_ROUTE.replace("-detail", "-list"))
    return "/" + url.removeprefix(get_script_prefix())  # compared with paths without the root path


class ChunkUploadRoute:
    """ASGI middleware: PATCH on the upload-file route goes to `StreamingBodyHandler`, the rest to `app`."""

    def __init__(self, app: Any, *, malloc: bool = True) -> None:
        self.app = app
        self.streaming = StreamingBodyHandler()
        if malloc:
            tune_malloc()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope.get("method") == "PATCH" and self.is_chunk_route(scope):
            await self.streaming(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    @staticmethod
    def is_chunk_route(scope: dict) -> bool:
        path: str = scope.get("path", "")
        root = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        if not path.startswith(_chunk_prefix()):  # resolving costs ~1 ms with this many routes
            return False
        try:
            match = get_resolver().resolve(path)
        except Resolver404:
            return False
        return match.view_name == CHUNK_ROUTE
