"""Calling a chat model from the portal's own code (the knowledge base's answers, a playground): an OpenAI-compatible
chat client over a base URL, and `client_for(service)` for an `llm` inference service of the portal.

    client = client_for(service)                      # a ready replica of the service's current revision
    result = client.complete(messages, max_tokens=200, temperature=0)
    result.text, result.finish_reason, result.usage
    for piece in client.stream(messages, max_tokens=200):   # the text as it is generated
        ...

The same `ChatClient` talks to an external OpenAI-compatible endpoint (`ChatClient("https://host/v1", api_key)`).
`client_for` goes straight to a replica, not through the router: the caller runs inside the portal and must have
checked the user's access to the service itself (as its own views and API do, through the project's permissions).
Errors are `ChatError`s carrying the status and the server's message (OpenAI's error shape)."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import requests
from django.utils.translation import gettext as _

from apps.serving.models import Framework, InferenceService, Replica

DEFAULT_TIMEOUT = 120.0  # seconds: a queued request waits for the generations before it (one at a time)


class ChatError(Exception):
    """The chat endpoint could not answer: `status` is its HTTP status (0: not reached), the message its reason."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class ChatResult:
    text: str
    finish_reason: str
    usage: dict[str, int]
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass
class ChatClient:
    """An OpenAI-compatible chat completions client; `base_url` ends with /v1 (as OpenAI's clients take it)."""

    base_url: str
    api_key: str = ""
    model: str = ""
    timeout: float = DEFAULT_TIMEOUT

    def _post(self, body: dict[str, Any], stream: bool) -> requests.Response:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        try:
            response = requests.post(
                f"{self.base_url.rstrip('/')}/chat/completions",
                json=body,
                headers=headers,
                timeout=self.timeout,
                stream=stream,
            )
        except requests.RequestException as exc:
            raise ChatError(_("The chat model could not be reached: %(e)s") % {"e": exc}) from None
        if response.status_code != 200:
            raise ChatError(_error_message(response), response.status_code)
        return response

    def _body(self, messages: list[dict[str, Any]], params: dict[str, Any], stream: bool) -> dict[str, Any]:
        body = {"messages": messages, **{k: v for k, v in params.items() if v is not None}}
        if self.model:
            body.setdefault("model", self.model)
        if stream:
            body["stream"] = True
        return body

    def complete(self, messages: list[dict[str, Any]], **params: Any) -> ChatResult:
        """One completion (params: max_tokens, temperature, top_p, stop, seed, …)."""
        response = self._post(self._body(messages, params, stream=False), stream=False)
        try:
            document = response.json()
            choice = document["choices"][0]
            return ChatResult(
                choice["message"].get("content") or "", choice.get("finish_reason") or "", document.get("usage") or {},
                document,
            )  # fmt: skip
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ChatError(_("The chat model answered something else than a completion: %(e)s") % {"e": exc}) from None

    def stream(self, messages: list[dict[str, Any]], **params: Any) -> Iterator[str]:
        """The completion's text piece by piece, as the server sends its events."""
        response = self._post(self._body(messages, params, stream=True), stream=True)
        with response:
            for line in response.iter_lines(decode_unicode=False):
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    return
                try:
                    event = json.loads(data)
                except ValueError:
                    raise ChatError(_("The chat model sent an event that is not JSON.")) from None
                if "error" in event:
                    raise ChatError(str(event["error"].get("message") or event["error"]), 500)
                for choice in event.get("choices") or ():
                    piece = (choice.get("delta") or {}).get("content")
                    if piece:
                        yield piece


def _error_message(response: requests.Response) -> str:
    try:
        error = response.json()["error"]
        return str(error["message"] if isinstance(error, dict) else error)
    except (ValueError, KeyError, TypeError):
        return f"HTTP {response.status_code}: {response.text[:200]}"


def client_for(service: InferenceService, timeout: float = DEFAULT_TIMEOUT) -> ChatClient:
    """A client of a ready replica of `service`'s current revision (an `llm` service). ChatError when it has none."""
    if service.framework != Framework.LLM:
        raise ChatError(_("%(name)s does not serve a chat model.") % {"name": service.name})
    revision = service.current_revision
    ready = Replica.objects.none() if revision is None else revision.replicas.filter(status=Replica.Status.READY)
    upstreams = list(ready.exclude(upstream="").values_list("upstream", flat=True))
    if not upstreams:
        raise ChatError(_("%(name)s has no ready replica.") % {"name": service.name}, 503)
    model = (revision.config or {}).get("model_name") or service.name
    return ChatClient(f"{random.choice(upstreams)}/v1", model=model, timeout=timeout)  # nosec B311 (balancing)
