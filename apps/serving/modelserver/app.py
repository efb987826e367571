"""The model server's ASGI application: the Open Inference Protocol v2 REST endpoints and /metrics, written
against raw ASGI (a framework's routing and request objects cost more than this whole app does per request:
docs/serving-modelserver.md has the numbers).

    GET  /v2/health/live, /v2/health/ready, /v2          server liveness, readiness, metadata
    GET  /v2/models/{m}[/versions/{v}]                   model metadata (inputs/outputs from the model)
    GET  /v2/models/{m}[/versions/{v}]/ready             model readiness
    POST /v2/models/{m}[/versions/{v}]/infer             inference (JSON, or binary tensors after a JSON header)
    POST /v2/models/{m}[/versions/{v}]/explain           per-row feature contributions (SHAP values: explain.py)
    GET  /metrics                                        Prometheus text (metrics.py)

Errors answer {"error": "..."}: 400 for a request the model cannot take, 404 for an unknown model or
version, 405, 413, and 500 only when the model itself fails."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import orjson

from apps.serving.modelserver import explain as explaining
from apps.serving.modelserver.batching import (
    INLINE_BELOW_SECONDS,
    Batcher,
    ModelError,
    configure_frameworks,
    predict_timing,
)
from apps.serving.modelserver.body import BodyTooLarge, Disconnected, read_body
from apps.serving.modelserver.loading import load
from apps.serving.modelserver.metrics import CONTENT_TYPE, Metrics
from apps.serving.modelserver.predictors import Predictor
from apps.serving.modelserver.protocol import BadRequest, decode_request, encode_error, encode_response

SERVER_NAME = "portal-modelserver"
SERVER_VERSION = "1.0"
CONFIG_ENV = "MODELSERVER_CONFIG"  # how --workers N hands the options to its worker processes
READY_ENV = "MODELSERVER_READY"  # where each of them tells the parent it serves (HOST:PORT, UDP)
JSON = b"application/json"
OCTETS = b"application/octet-stream"  # a JSON header, then binary tensor data
HEADER_LENGTH = b"inference-header-content-length"
EXTENSIONS = ["binary_tensor_data"]
logger = logging.getLogger("modelserver")


class _Encoded(Exception):
    """A compressed request body (Content-Encoding), which the server does not take."""


@dataclass
class ServedModel:
    """One model in this process: its predictor, batcher, counters and its precomputed metadata."""

    name: str
    version: str
    predictor: Predictor
    batcher: Batcher
    metrics: Metrics
    metadata: bytes = b""
    calibration: dict[str, Any] = field(default_factory=dict)


class ModelServer:
    """The ASGI callable."""

    def __init__(self, models: dict[str, ServedModel], max_body_bytes: int = 64 << 20, ready_to: str = "") -> None:
        self.models = models
        self.max_body_bytes = max_body_bytes
        self.ready_to = ready_to  # HOST:PORT told this process's pid when it starts serving (--workers N)
        # One thread for explanations, made on first use (most replicas never explain).
        self._explainer: ThreadPoolExecutor | None = None
        self.server_metadata = orjson.dumps({"name": SERVER_NAME, "version": SERVER_VERSION, "extensions": EXTENSIONS})

    @property
    def explainer(self) -> ThreadPoolExecutor:
        if self._explainer is None:
            self._explainer = ThreadPoolExecutor(1, thread_name_prefix="explain", initializer=configure_frameworks)
        return self._explainer

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    async def _http(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path: str = scope["path"]
        method: str = scope["method"]
        if path.startswith("/v2/models/"):
            await self._model_route(path[len("/v2/models/") :].split("/"), method, scope, receive, send)
            return
        if path in ("/v2/health/live", "/v2/health/ready", "/v2", "/metrics"):
            if method not in ("GET", "HEAD"):
                await _respond(send, 405, encode_error(f"{method} is not allowed on {path} (use GET)"))
            elif path == "/metrics":
                body = b"".join(model.metrics.render() for model in self.models.values())
                await _respond(send, 200, body, CONTENT_TYPE)
            elif path == "/v2":
                await _respond(send, 200, self.server_metadata)
            else:
                key = "live" if path.endswith("live") else "ready"
                await _respond(send, 200, orjson.dumps({key: True}))
            return
        await _respond(send, 404, encode_error(f"no such endpoint: {path}"))

    async def _model_route(self, parts: list[str], method: str, scope: dict[str, Any], receive: Any, send: Any) -> None:
        name, tail = parts[0], parts[1:]
        version = None
        if len(tail) >= 2 and tail[0] == "versions":
            version, tail = tail[1], tail[2:]
        action = "/".join(tail)
        if action not in ("", "ready", "infer", "explain"):
            await _respond(send, 404, encode_error(f"no such endpoint: /v2/models/{'/'.join(parts)}"))
            return
        model = self.models.get(name)
        if model is None:
            served = ", ".join(self.models) or "none"
            await _respond(send, 404, encode_error(f"unknown model {name!r} (this server serves: {served})"))
            return
        if version is not None and version != model.version:
            message = f"model {name!r} has no version {version!r} (this server serves version {model.version!r})"
            await _respond(send, 404, encode_error(message))
            return
        wanted = "POST" if action in ("infer", "explain") else "GET"
        if method != wanted and not (wanted == "GET" and method == "HEAD"):
            await _respond(send, 405, encode_error(f"{method} is not allowed here (use {wanted})"))
            return
        if action == "infer":
            await self._infer(model, scope, receive, send)
        elif action == "explain":
            await self._explain(model, scope, receive, send)
        elif action == "ready":
            await _respond(send, 200, orjson.dumps({"name": name, "ready": True}))
        else:
            await _respond(send, 200, model.metadata)

    async def _infer(self, model: ServedModel, scope: dict[str, Any], receive: Any, send: Any) -> None:
        metrics = model.metrics
        started = time.perf_counter()
        metrics.inflight += 1
        status = 200
        extra: tuple[tuple[bytes, bytes], ...] = ()
        content_type = JSON
        try:
            body = await read_body(receive, self.max_body_bytes)
            request = decode_request(body, model.predictor, _header_length(scope))
            results = await model.batcher.predict(request.x, request.outputs)
            payload, json_size = encode_response(model.name, model.version, request.id, results, request.binary)
            if json_size is not None:
                content_type = OCTETS
                extra = ((HEADER_LENGTH, str(json_size).encode()),)
        except (BadRequest, _Encoded, BodyTooLarge) as exc:
            status, payload = _refused(exc)
            metrics.errors["bad_input"] += 1
        except ModelError as exc:
            status, payload = 500, encode_error(f"the model failed: {exc}")
            metrics.errors["model_error"] += 1
        except Disconnected:
            metrics.inflight -= 1
            return
        except Exception as exc:  # a bug of ours: answer, log, keep serving
            logger.exception("inference failed")
            status, payload = 500, encode_error(f"internal error: {type(exc).__name__}: {exc}")
            metrics.errors["internal"] += 1
        metrics.inflight -= 1
        metrics.requests[status] += 1
        metrics.request_seconds.observe(time.perf_counter() - started)
        await _respond(send, status, payload, content_type, *extra)

    async def _explain(self, model: ServedModel, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Per-row SHAP values (explain.py) on a thread of its own: an explanation evaluates the model on hundreds
        to thousands of rows, which must not hold up the event loop, nor the batcher's predict thread."""
        metrics = model.metrics
        started = time.perf_counter()
        metrics.inflight += 1
        status = 200
        try:
            body = await read_body(receive, self.max_body_bytes)
            request = explaining.decode(body, model.predictor, _header_length(scope))
            loop = asyncio.get_running_loop()
            document = await loop.run_in_executor(self.explainer, explaining.explain, model.predictor, request)
            header: dict[str, Any] = {"model_name": model.name, "model_version": model.version}
            if request.id is not None:
                header["id"] = request.id
            payload = orjson.dumps({**header, **document}, option=orjson.OPT_SERIALIZE_NUMPY)
        except (BadRequest, _Encoded, BodyTooLarge) as exc:
            status, payload = _refused(exc)
            metrics.errors["bad_input"] += 1
        except Disconnected:
            metrics.inflight -= 1
            return
        except Exception as exc:  # the model failing on input the protocol accepted, or a bug of ours
            logger.exception("explanation failed")
            status, payload = 500, encode_error(f"the model failed: {type(exc).__name__}: {exc}")
            metrics.errors["model_error"] += 1
        metrics.inflight -= 1
        metrics.requests[status] += 1
        metrics.request_seconds.observe(time.perf_counter() - started)
        await _respond(send, status, payload)

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
                if self.ready_to:
                    host, port = self.ready_to.rsplit(":", 1)
                    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tell:
                        tell.sendto(str(os.getpid()).encode(), (host, int(port)))
            elif message["type"] == "lifespan.shutdown":
                for model in self.models.values():
                    model.batcher.close()
                if self._explainer is not None:
                    self._explainer.shutdown(wait=False)
                await send({"type": "lifespan.shutdown.complete"})
                return


def _header_length(scope: dict[str, Any]) -> int | None:
    """The Inference-Header-Content-Length header: the size of the JSON before binary tensor data. Raises
    _Encoded for a compressed body (tritonclient's request_compression_algorithm)."""
    found = None
    for name, value in scope["headers"]:
        if name == b"content-encoding" and value.strip().lower() not in (b"", b"identity"):
            raise _Encoded(value.decode("latin-1"))
        if name == HEADER_LENGTH:
            if not value.strip().isdigit():
                raise BadRequest(
                    f"Inference-Header-Content-Length must be a byte count, not {value.decode('latin-1')!r}"
                )
            found = int(value)
    return found


def _refused(exc: Exception) -> tuple[int, bytes]:
    """The status and body for a request that infer and explain refuse before the model sees it."""
    if isinstance(exc, _Encoded):
        return 415, encode_error(f"compressed request bodies are not taken (Content-Encoding: {exc})")
    if isinstance(exc, BodyTooLarge):
        return 413, encode_error(str(exc))
    return 400, encode_error(str(exc))


async def _respond(
    send: Any, status: int, body: bytes, content_type: bytes = JSON, *extra: tuple[bytes, bytes]
) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def metadata(name: str, version: str, predictor: Predictor, max_batch_size: int) -> bytes:
    """The model metadata response: inputs and outputs as the model declares them (probed when it does not)."""
    parameters = {
        **predictor.parameters,
        "default_outputs": list(predictor.default_outputs),
        "max_batch_size": max_batch_size,
    }
    if predictor.feature_names:
        parameters["feature_names"] = predictor.feature_names
    document = {
        "name": name,
        "versions": [version],
        "platform": predictor.platform,
        "inputs": [predictor.input.as_dict()],
        "outputs": [spec.as_dict() for spec in predictor.outputs.values()],
        "parameters": parameters,
    }
    return orjson.dumps(document)


def build(options: dict[str, Any]) -> ModelServer:
    """Load the model and assemble the app. `options`: name, model, version, max_batch_size,
    max_batch_delay_ms, predict_thread ("auto" | "always" | "never"), max_body_mb. Raises LoadError."""
    configure_frameworks()
    predictor = load(options["model"])
    max_rows = int(options.get("max_batch_size", 32))
    seconds = predict_timing(predictor, max_rows)
    mode = options.get("predict_thread", "auto")
    in_thread = mode == "always" or (mode == "auto" and (seconds is None or seconds >= INLINE_BELOW_SECONDS))
    name, version = options["name"], str(options.get("version", "1"))
    metrics = Metrics(name, version, predictor.platform)
    batcher = Batcher(predictor, metrics, max_rows, float(options.get("max_batch_delay_ms", 2)) / 1000, in_thread)
    model = ServedModel(name, version, predictor, batcher, metrics, metadata(name, version, predictor, max_rows))
    model.calibration = {"batch_seconds": seconds, "in_thread": in_thread}
    return ModelServer({name: model}, int(float(options.get("max_body_mb", 64)) * (1 << 20)))


def create_app() -> ModelServer:
    """The factory uvicorn's worker processes call (--workers N): options come from the environment."""
    app = build(json.loads(os.environ[CONFIG_ENV]))
    app.ready_to = os.environ.get(READY_ENV, "")
    return app
