"""Streamed responses that stay streamed under ASGI.

Django's ASGI handler reads a *synchronous* streaming iterator to the end, into memory, before it sends a
byte ("StreamingHttpResponse must consume synchronous iterators…"): a FileResponse of a 5 GB artifact
would need 5 GB of RAM. `StreamingUnderASGIMiddleware` hands such iterators to the server as async
iterators that pull one chunk at a time, so every download (artifacts, dataset files, logs, CSV exports)
streams with flat memory whatever view made it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse

_END = object()


async def pull_chunks(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    """Each chunk pulled on Django's sync thread (iterators may read the database), one at a time."""
    pull = sync_to_async(next, thread_sensitive=True)
    iterator = iter(chunks)
    while (chunk := await pull(iterator, _END)) is not _END:
        yield chunk


class StreamingUnderASGIMiddleware:
    """Outermost middleware: turns a synchronous streaming response into an asynchronous one under ASGI."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if isinstance(request, ASGIRequest) and getattr(response, "streaming", False) and not response.is_async:
            response.streaming_content = pull_chunks(response.streaming_content)
        return response
