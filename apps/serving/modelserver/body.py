"""Reading an ASGI request's body within a size limit, for both of the model server's apps (the inference protocol's
and the OpenAI-compatible chat's)."""

from __future__ import annotations

from typing import Any


class Disconnected(Exception):
    """The client went away before its whole body arrived: nothing to answer."""


class BodyTooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"the body is larger than {limit} bytes")


async def read_body(receive: Any, limit: int) -> bytes:
    """The request's body, joined from its `http.request` messages; BodyTooLarge past `limit` bytes (read no
    further), Disconnected when the client left first."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Disconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        chunks.append(chunk)
        if not message.get("more_body"):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
