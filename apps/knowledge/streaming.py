"""An answer as server-sent events, for the chat page and the API's streaming `/chat/`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from django.http import StreamingHttpResponse

from apps.knowledge.chat import Answer
from apps.knowledge.llm import LLMError


def event(name: str, data: Any) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def events(answer: Answer, citations: list[dict[str, Any]]) -> Iterator[bytes]:
    yield event("passages", {"not_found": answer.result.not_found, "passages": citations})
    try:
        for piece in answer.tokens:
            yield event("token", piece)
    except LLMError as exc:
        yield event("error", str(exc))
        return
    yield event("done", {"cited": answer.cited})  # the passages the answer rests on, as the portal checked


def sse_error(message: str) -> StreamingHttpResponse:
    return _streaming(iter([event("error", message)]))


def sse_response(answer: Answer, citations: list[dict[str, Any]]) -> StreamingHttpResponse:
    return _streaming(events(answer, citations))


def _streaming(chunks: Iterator[bytes]) -> StreamingHttpResponse:
    response = StreamingHttpResponse(chunks, content_type="text/event-stream; charset=utf-8")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # proxies pass each token on at once
    return response
