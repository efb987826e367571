"""OpenAI's chat completions protocol, as far as the `llm` runtime serves it: requests checked field by field (a 400 in
OpenAI's error shape naming the parameter), and the answer objects — `chat.completion`, `chat.completion.chunk` for
server-sent events, `model` lists. Pure functions over dicts; the ASGI side is chat.py, generation llm.py.

Taken: `model` (the served name, or left out), `messages` (system / user / assistant / developer / tool turns; content
a string or a list of text parts), `max_tokens` or `max_completion_tokens`, `temperature` (0 = greedy), `top_p`,
`stop` (a string or up to 4), `seed`, `stream`, `stream_options.include_usage`, `n` (1 only), and the penalties and
`logprobs` at their neutral values. Refused with a 400 saying so rather than silently ignored: n > 1, non-zero
penalties, logprobs, tools, response_format other than text. Unknown fields (user, metadata, …) are ignored, as
OpenAI-compatible servers commonly do.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass, field
from typing import Any

import orjson

ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_STOPS = 4
MAX_STOP_CHARS = 200
DEFAULT_MAX_TOKENS = 256


class RequestError(Exception):
    """A request the server cannot take: status, message, the parameter at fault, OpenAI's error type and code."""

    def __init__(self, message: str, param: str | None = None, *, status: int = 400, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.param, self.code = status, param, code
        self.type = "invalid_request_error" if status < 500 else "server_error"

    def body(self) -> bytes:
        return error_body(str(self), self.type, self.param, self.code)


def error_body(message: str, kind: str = "invalid_request_error", param: str | None = None, code: Any = None) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": kind, "param": param, "code": code}})


@dataclass
class ChatRequest:
    messages: list[dict[str, str]]
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    stream: bool = False
    include_usage: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def _number(body: dict[str, Any], name: str, low: float, high: float, default: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RequestError(f"{name} must be a number", name)
    if not low <= value <= high:
        raise RequestError(f"{name} must be from {low:g} to {high:g}; got {value:g}", name)
    return float(value)


def _integer(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"{name} must be an integer", name)
    return value


def _content(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = []
        for i, part in enumerate(value):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise RequestError(f"{where}.content[{i}] must be a text part {{'type': 'text', 'text': ...}}", where)
            texts.append(part["text"])
        return "".join(texts)
    raise RequestError(f"{where}.content must be a string or a list of text parts", where)


def _messages(value: Any) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise RequestError("messages must be a non-empty list of {role, content} objects", "messages")
    out = []
    for i, message in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise RequestError(f"{where} must be an object with role and content", where)
        role = message.get("role")
        if role not in ROLES:
            raise RequestError(f"{where}.role must be one of {', '.join(ROLES)}; got {role!r}", where)
        if message.get("tool_calls"):
            raise RequestError(f"{where}: tool calls are not supported by this model server", where)
        content = message.get("content")
        if content is None and role == "assistant":
            content = ""
        text = _content(content, where)
        out.append({"role": "system" if role == "developer" else role, "content": text})
    if out[-1]["role"] == "assistant":
        raise RequestError("the last message must not be the assistant's (nothing would be asked)", "messages")
    return out


def parse_chat(raw: bytes, served: str, max_tokens_limit: int) -> ChatRequest:
    """A checked ChatRequest from a request body; RequestError (400, or 404 for another model) otherwise."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RequestError(f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise RequestError("the body must be a JSON object")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise RequestError("model must be a string", "model")
    if model not in (None, "", served):
        raise RequestError(
            f"The model {model!r} does not exist (this server serves {served!r})", "model", status=404,
            code="model_not_found",
        )  # fmt: skip
    messages = _messages(body.get("messages"))
    max_tokens = _integer(body, "max_completion_tokens")
    name = "max_completion_tokens"
    if max_tokens is None:
        max_tokens, name = _integer(body, "max_tokens"), "max_tokens"
    if max_tokens is None:
        max_tokens = min(DEFAULT_MAX_TOKENS, max_tokens_limit)
    if not 1 <= max_tokens <= max_tokens_limit:
        raise RequestError(f"{name} must be from 1 to {max_tokens_limit}; got {max_tokens}", name)
    n = _integer(body, "n")
    if n not in (None, 1):
        raise RequestError("n must be 1: this server makes one choice per request", "n")
    for penalty in ("presence_penalty", "frequency_penalty"):
        if _number(body, penalty, -2, 2, 0.0) != 0:
            raise RequestError(f"{penalty} is not supported by this model server (leave it out or 0)", penalty)
    if body.get("logprobs") or body.get("top_logprobs"):
        raise RequestError("logprobs are not supported by this model server", "logprobs")
    if body.get("tools") or body.get("functions") or body.get("tool_choice") not in (None, "none"):
        raise RequestError("tools are not supported by this model server", "tools")
    response_format = body.get("response_format")
    if response_format is not None and response_format != {"type": "text"}:
        raise RequestError("response_format must be {'type': 'text'} (the only format served)", "response_format")
    stop = body.get("stop")
    stops: tuple[str, ...]
    if stop is None:
        stops = ()
    elif isinstance(stop, str):
        stops = (stop,) if stop else ()
    elif isinstance(stop, list) and len(stop) <= MAX_STOPS and all(isinstance(s, str) and s for s in stop):
        stops = tuple(stop)
    else:
        raise RequestError(f"stop must be a string or a list of up to {MAX_STOPS} non-empty strings", "stop")
    if any(len(s) > MAX_STOP_CHARS for s in stops):
        raise RequestError(f"a stop sequence may have up to {MAX_STOP_CHARS} characters", "stop")
    seed = _integer(body, "seed")
    if seed is not None and not 0 <= seed < 2**63:
        raise RequestError("seed must be from 0 to 2**63 - 1", "seed")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise RequestError("stream must be true or false", "stream")
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not isinstance(options, dict) or not isinstance(options.get("include_usage", False), bool):
            raise RequestError("stream_options must be an object like {'include_usage': true}", "stream_options")
        if not stream:
            raise RequestError("stream_options is only allowed with stream: true", "stream_options")
        include_usage = options.get("include_usage", False)
    return ChatRequest(
        messages=messages,
        max_tokens=max_tokens,
        temperature=_number(body, "temperature", 0, 2, 1.0),
        top_p=_number(body, "top_p", 0, 1, 1.0),
        stop=stops,
        seed=seed,
        stream=stream,
        include_usage=include_usage,
    )


def completion_id() -> str:
    return "chatcmpl-" + secrets.token_hex(12)


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def completion(ident: str, created: int, model: str, fingerprint: str, text: str, finish: str, use: dict) -> bytes:
    return orjson.dumps(
        {
            "id": ident,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "system_fingerprint": fingerprint,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text, "refusal": None},
                    "logprobs": None,
                    "finish_reason": finish,
                }
            ],
            "usage": use,
        }
    )


def chunk(
    ident: str,
    created: int,
    model: str,
    fingerprint: str,
    delta: dict[str, Any] | None,
    finish: str | None = None,
    use: dict | None = None,
) -> bytes:
    """One server-sent event: `data: <chat.completion.chunk>` and a blank line. `delta` None: the usage chunk
    (no choices), sent last when the request asked for stream_options.include_usage."""
    document: dict[str, Any] = {
        "id": ident,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": fingerprint,
        "choices": [] if delta is None else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    if use is not None or delta is None:
        document["usage"] = use
    return b"data: " + orjson.dumps(document) + b"\n\n"


DONE = b"data: [DONE]\n\n"


def models_list(model: str, created: int) -> bytes:
    return orjson.dumps({"object": "list", "data": [model_object(model, created)]})


def model_object(model: str, created: int) -> dict[str, Any]:
    return {"id": model, "object": "model", "created": created, "owned_by": "portal"}
