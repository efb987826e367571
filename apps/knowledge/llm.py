"""A client of the OpenAI-compatible chat API (`POST {base}/chat/completions`, `"stream": true`, server-sent events),
so a knowledge base answers through the portal's own `llm` inference service or any external endpoint.

Only the protocol is assumed: each event is `data: {"choices": [{"delta": {"content": "…"}}]}`, the stream ends with
`data: [DONE]`. Errors come back as `LLMError` with the endpoint's own message where it sent one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
from django.utils.translation import gettext as _

CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 120.0  # between two chunks: a small CPU model can be slow to its first token


class LLMError(Exception):
    """The endpoint could not be reached or refused the request; the message says which, for the user."""


@dataclass(frozen=True)
class Endpoint:
    base_url: str  # ".../v1"
    model: str
    api_key: str = ""

    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

    def headers(self) -> dict[str, str]:
        headers = {"Accept": "text/event-stream", "Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers


def _error_of(response: httpx.Response) -> str:
    try:
        body = json.loads(response.read() or b"{}")
    except ValueError:
        body = {}
    detail = body.get("error") if isinstance(body, dict) else None
    if isinstance(detail, dict):
        detail = detail.get("message")
    return _("The LLM endpoint answered HTTP %(status)d: %(detail)s") % {
        "status": response.status_code,
        "detail": detail or response.reason_phrase,
    }


def stream_chat(
    endpoint: Endpoint, messages: list[dict[str, str]], max_tokens: int = 512, temperature: float = 0.2
) -> Iterator[str]:
    """Yield the answer's text as the endpoint streams it, piece by piece."""
    body = {
        "model": endpoint.model,
        "messages": messages,
        "stream": True,
        "max_tokens": max_tokens,
        "temperature": temperature,
    }
    timeout = httpx.Timeout(READ_TIMEOUT, connect=CONNECT_TIMEOUT)
    try:
        with (
            httpx.Client(timeout=timeout) as client,
            client.stream("POST", endpoint.url(), json=body, headers=endpoint.headers()) as response,
        ):
            if response.status_code != 200:
                raise LLMError(_error_of(response))
            for line in response.iter_lines():
                if not line.startswith("data:"):
                    continue  # comments, event names, keep-alives
                data = line[5:].strip()
                if data == "[DONE]":
                    return
                try:
                    event = json.loads(data)
                except ValueError:
                    raise LLMError(_("The LLM endpoint sent an event that is not JSON.")) from None
                if isinstance(event, dict) and event.get("error"):
                    raise LLMError(str(event["error"].get("message", event["error"])))
                for choice in event.get("choices") or []:
                    piece = (choice.get("delta") or {}).get("content")
                    if piece:
                        yield piece
    except httpx.HTTPError as exc:
        raise LLMError(_("The LLM endpoint cannot be reached: %(error)s") % {"error": exc}) from None
