"""The `llm` runtime's ASGI application: an OpenAI-compatible chat server over one model (llm.py), in raw ASGI like
app.py.

    POST /v1/chat/completions            a chat completion; `stream: true` answers server-sent events
                                         (`chat.completion.chunk` objects, then `data: [DONE]`)
    GET  /v1/models, /v1/models/{id}     the served model
    GET  /v2/health/live, /v2/health/ready, /v2/models/{m}[/ready]
                                         what the control plane's readiness probe and the router's service page
                                         ask every replica (the Open Inference Protocol's health endpoints)
    GET  /metrics                        Prometheus text

One generation runs at a time, on one worker thread (the model's forward pass is already spread over the
replica's CPU threads; docs/serving-llm.md has the measurement against batching): requests queue in arrival order
and a full queue (`max_waiting`) answers 503 with Retry-After. A client that disconnects cancels its generation
between two tokens (queued or running), so an abandoned stream costs at most one token more.

Errors are OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`: 400 for a bad request (the
parameter named), 404 for an unknown path or model, 405, 413, 503 when the queue is full, 500 only when the
model fails."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import orjson

from apps.serving.modelserver import openai
from apps.serving.modelserver.body import BodyTooLarge, Disconnected, read_body
from apps.serving.modelserver.llm import ChatModel, ContextTooLong, Generation, Sampling

logger = logging.getLogger("modelserver")
JSON = b"application/json"
EVENTS = b"text/event-stream"
PLATFORM = "llm"


@dataclass
class Counters:
    """Per-process counters for /metrics (plain integers on the event loop)."""

    requests: Counter[int]
    prompt_tokens: int = 0
    completion_tokens: int = 0
    running: int = 0
    waiting: int = 0
    generations: int = 0
    generation_seconds: float = 0.0
    first_token_seconds: float = 0.0


class ChatServer:
    """The ASGI callable."""

    def __init__(
        self, name: str, model: ChatModel, *, version: str = "1", max_waiting: int = 32, max_body_bytes: int = 8 << 20
    ) -> None:
        self.name, self.model, self.version = name, model, version
        self.max_waiting, self.max_body_bytes = max_waiting, max_body_bytes
        self.created = int(time.time())
        self.fingerprint = f"portal-{PLATFORM}-{version}"
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="generate")
        self.counters = Counters(requests=Counter())
        # The most a request may ask: the context less a token of prompt.
        self.max_tokens = max(1, model.context - 1)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    self.executor.shutdown(wait=False, cancel_futures=True)
                    await send({"type": "lifespan.shutdown.complete"})
                    return

    async def _http(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path: str = scope["path"].rstrip("/") or "/"
        method: str = scope["method"]
        if path == "/v1/chat/completions":
            if method != "POST":
                await self._answer(send, 405, openai.error_body(f"{method} is not allowed here (use POST)"))
                return
            await self._chat(receive, send)
            return
        gets = {"/v1/models", "/v2/health/live", "/v2/health/ready", "/metrics", f"/v1/models/{self.name}"}
        gets |= {f"/v2/models/{self.name}", f"/v2/models/{self.name}/ready"}
        if path in gets:
            if method not in ("GET", "HEAD"):
                await self._answer(send, 405, openai.error_body(f"{method} is not allowed on {path} (use GET)"))
            else:
                await self._get(path, send)
            return
        if path.startswith("/v1/models/"):
            message = f"The model {path[len('/v1/models/') :]!r} does not exist (this server serves {self.name!r})"
            await self._answer(send, 404, openai.error_body(message, code="model_not_found"))
            return
        await self._answer(send, 404, openai.error_body(f"no such endpoint: {path}", code="not_found"))

    async def _get(self, path: str, send: Any) -> None:
        if path == "/v1/models":
            body = openai.models_list(self.name, self.created)
        elif path.startswith("/v1/models/"):
            body = orjson.dumps(openai.model_object(self.name, self.created))
        elif path.startswith("/v2/health/"):
            body = orjson.dumps({path.rsplit("/", 1)[1]: True})
        elif path.endswith("/ready"):
            body = orjson.dumps({"name": self.name, "ready": True})
        elif path.startswith("/v2/models/"):
            body = orjson.dumps(self.metadata())
        else:
            await self._answer(send, 200, self.metrics().encode(), b"text/plain; version=0.0.4; charset=utf-8")
            return
        await self._answer(send, 200, body)

    def metadata(self) -> dict[str, Any]:
        """What GET /v2/models/{m} says of an llm replica: no tensors, the chat endpoint and the model's limits."""
        return {
            "name": self.name,
            "versions": [self.version],
            "platform": PLATFORM,
            "inputs": [],
            "outputs": [],
            "parameters": {
                "endpoint": "/v1/chat/completions",
                "model": self.model.spec.describe(),
                "context_tokens": self.model.context,
                "threads": self.model.threads,
            },
        }

    async def _chat(self, receive: Any, send: Any) -> None:
        counters = self.counters
        try:
            try:
                raw = await read_body(receive, self.max_body_bytes)
            except BodyTooLarge as exc:
                raise openai.RequestError(str(exc), status=413) from None
            request = openai.parse_chat(raw, self.name, self.max_tokens)
            prompt = self.model.prompt_ids(request.messages)
            self.model.check_fits(prompt, request.max_tokens)
        except Disconnected:
            return
        except openai.RequestError as exc:
            await self._answer(send, exc.status, exc.body())
            return
        except ContextTooLong as exc:
            await self._answer(send, 400, openai.error_body(str(exc), param="messages", code="context_length_exceeded"))
            return
        if counters.waiting >= self.max_waiting:
            body = openai.error_body(
                f"the model server is busy ({counters.waiting} requests waiting); try again", "server_error"
            )
            await self._answer(send, 503, body, JSON, (b"retry-after", b"1"))
            return
        sampling = Sampling(request.max_tokens, request.temperature, request.top_p, request.stop, request.seed)
        job = _Job(asyncio.get_running_loop())
        watcher = asyncio.ensure_future(_watch_disconnect(receive, job))
        counters.waiting += 1
        job.future = asyncio.wrap_future(self.executor.submit(self._run, job, prompt, sampling))
        try:
            if request.stream:
                await self._stream(job, request, send)
            else:
                await self._complete(job, send)
        finally:
            watcher.cancel()
            if not job.started:
                job.cancel.set()  # still queued: the worker skips it
            await asyncio.shield(job.future)  # the worker is done with it before the next request is told

    def _run(self, job: _Job, prompt: list[int], sampling: Sampling) -> None:
        """On the worker thread: generate, handing each piece to the event loop."""
        loop, counters = job.loop, self.counters
        loop.call_soon_threadsafe(_started, counters, job)
        if job.cancel.is_set():  # its client left while it waited
            loop.call_soon_threadsafe(_finished, counters, None)
            loop.call_soon_threadsafe(job.put, None, None)
            return
        result: Generation | None = None
        try:
            for piece, progress in self.model.generate(prompt, sampling, job.cancel.is_set):
                result = progress
                if piece:
                    loop.call_soon_threadsafe(job.put, piece, None)
        except Exception as exc:  # the model failed: the request says so, the server keeps serving
            logger.exception("generation failed")
            loop.call_soon_threadsafe(job.put, None, exc)
            return
        finally:
            loop.call_soon_threadsafe(_finished, counters, result)
        loop.call_soon_threadsafe(job.put, None, result)

    async def _complete(self, job: _Job, send: Any) -> None:
        while True:
            piece, end = await job.queue.get()
            if piece is None:
                break
        if isinstance(end, Exception):
            await self._answer(send, 500, openai.error_body(f"the model failed: {end}", "server_error"))
            return
        if not isinstance(end, Generation):  # cancelled before it ran: the client is gone
            return
        body = openai.completion(
            openai.completion_id(), int(time.time()), self.name, self.fingerprint, end.text,
            _finish(end), openai.usage(end.prompt_tokens, end.completion_tokens),
        )  # fmt: skip
        await self._answer(send, 200, body)

    async def _stream(self, job: _Job, request: openai.ChatRequest, send: Any) -> None:
        ident, created = openai.completion_id(), int(time.time())
        headers = [(b"content-type", EVENTS), (b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]
        self.counters.requests[200] += 1
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        try:
            first = openai.chunk(ident, created, self.name, self.fingerprint, {"role": "assistant", "content": ""})
            await _body(send, first)
            while True:
                piece, end = await job.queue.get()
                if piece is None:
                    break
                await _body(send, openai.chunk(ident, created, self.name, self.fingerprint, {"content": piece}))
            if isinstance(end, Exception):
                error = openai.error_body(f"the model failed: {end}", "server_error")
                await _body(send, b"data: " + error + b"\n\n")
            elif isinstance(end, Generation):
                await _body(send, openai.chunk(ident, created, self.name, self.fingerprint, {}, _finish(end)))
                if request.include_usage:
                    use = openai.usage(end.prompt_tokens, end.completion_tokens)
                    await _body(send, openai.chunk(ident, created, self.name, self.fingerprint, None, use=use))
            await _body(send, openai.DONE)
            await send({"type": "http.response.body", "body": b""})
        except OSError:  # the client went away mid-stream
            job.cancel.set()

    async def _answer(self, send: Any, status: int, body: bytes, content_type: bytes = JSON, *extra: Any) -> None:
        self.counters.requests[status] += 1
        headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode()), *extra]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def metrics(self) -> str:
        c, labels = self.counters, f'model="{self.name}"'
        lines = [
            "# TYPE modelserver_info gauge",
            f'modelserver_info{{{labels},version="{self.version}",platform="{PLATFORM}"}} 1',
            "# TYPE modelserver_requests_total counter",
            *(f'modelserver_requests_total{{{labels},code="{code}"}} {n}' for code, n in sorted(c.requests.items())),
            "# TYPE modelserver_inflight_requests gauge",
            f"modelserver_inflight_requests{{{labels}}} {c.running + c.waiting}",
            "# TYPE modelserver_llm_waiting_requests gauge",
            f"modelserver_llm_waiting_requests{{{labels}}} {c.waiting}",
            "# TYPE modelserver_llm_prompt_tokens_total counter",
            f"modelserver_llm_prompt_tokens_total{{{labels}}} {c.prompt_tokens}",
            "# TYPE modelserver_llm_completion_tokens_total counter",
            f"modelserver_llm_completion_tokens_total{{{labels}}} {c.completion_tokens}",
            "# TYPE modelserver_llm_generations_total counter",
            f"modelserver_llm_generations_total{{{labels}}} {c.generations}",
            "# TYPE modelserver_llm_generation_seconds_total counter",
            f"modelserver_llm_generation_seconds_total{{{labels}}} {c.generation_seconds:.6f}",
            "# TYPE modelserver_llm_first_token_seconds_total counter",
            f"modelserver_llm_first_token_seconds_total{{{labels}}} {c.first_token_seconds:.6f}",
        ]
        return "\n".join(lines) + "\n"


class _Job:
    """One request's generation: the pieces the worker hands over, and the flag that cancels it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue[tuple[str | None, Any]] = asyncio.Queue()
        self.cancel = threading.Event()
        self.started = False
        self.future: asyncio.Future[None] | None = None

    def put(self, piece: str | None, end: Any) -> None:
        self.queue.put_nowait((piece, end))


def _started(counters: Counters, job: _Job) -> None:
    job.started = True
    counters.waiting -= 1
    counters.running += 1


def _finished(counters: Counters, result: Generation | None) -> None:
    counters.running -= 1
    if result is not None:
        counters.generations += 1
        counters.prompt_tokens += result.prompt_tokens
        counters.completion_tokens += result.completion_tokens
        counters.generation_seconds += result.seconds
        counters.first_token_seconds += result.seconds_to_first_token


def _finish(result: Generation) -> str:
    return "length" if result.finish_reason == "length" else "stop"


async def _body(send: Any, data: bytes) -> None:
    await send({"type": "http.response.body", "body": data, "more_body": True})


async def _watch_disconnect(receive: Any, job: _Job) -> None:
    """Cancel the job when the client disconnects (the request body was read whole before)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            job.cancel.set()
            return


def build(options: dict[str, Any]) -> ChatServer:
    """Load the model and assemble the app. `options`: name, model, base_model, version, threads, max_waiting,
    max_body_mb. Raises LoadError."""
    from apps.serving.modelserver.llm import resolve

    spec = resolve(options["model"], options.get("base_model", ""))
    model = ChatModel(spec, threads=int(options.get("threads") or 1))
    return ChatServer(
        options["name"],
        model,
        version=str(options.get("version", "1")),
        max_waiting=int(options.get("max_waiting", 32)),
        max_body_bytes=int(float(options.get("max_body_mb", 8)) * (1 << 20)),
    )
