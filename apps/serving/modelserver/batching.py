"""Adaptive request batching: concurrent requests to one model become one predict call on their stacked rows,
split back in order.

A request that finds the model idle is dispatched at the end of the current event-loop pass (call_soon):
it never waits for company, yet every request the same pass decoded (a burst read from many connections
at once) joins it. Requests that arrive while a batch is being predicted queue up and form the next batch
the moment it finishes, up to max_batch_size rows. max_batch_delay only applies under load (the last batch
or the queue held more than one request): the batcher then waits up to that long for the batch to fill.

Predict runs on one worker thread, so that the loop keeps reading and decoding the next requests meanwhile
(measured best even for a ~0.3 ms scikit-learn model: docs/serving-modelserver.md), except for microsecond
models (a full batch under 0.1 ms, e.g. a small ONNX graph), for which the hop costs more than the predict."""

from __future__ import annotations

import asyncio
import sys
import time
import warnings
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from apps.serving.modelserver.metrics import Metrics
from apps.serving.modelserver.predictors import Predictor
from apps.serving.modelserver.protocol import BadRequest

# A full batch faster than this runs on the event loop (see the module docstring).
INLINE_BELOW_SECONDS = 0.0001


class ModelError(Exception):
    """The model failed on input the protocol accepted, for a reason that is not the input's (500)."""


@dataclass(slots=True)
class _Item:
    x: np.ndarray
    outputs: tuple[str, ...]
    future: asyncio.Future


def configure_frameworks() -> None:
    """Per-thread settings of the frameworks in use. scikit-learn re-checks every input for NaN/inf and its
    parameters on each call (~40 % of a small model's predict); the protocol layer has already rejected
    non-finite values, so skip that. Its config is thread-local: call this on every thread that predicts."""
    sklearn = sys.modules.get("sklearn")
    if sklearn is not None:
        sklearn.set_config(assume_finite=True, skip_parameter_validation=True)
    # Models fitted on a DataFrame warn on every numpy batch; the feature count is checked before predict.
    warnings.filterwarnings("ignore", message="X does not have valid feature names")


class Batcher:
    """Coalesces concurrent predict calls of one model (one Batcher per model and process)."""

    def __init__(self, predictor: Predictor, metrics: Metrics, max_batch_size: int = 32,
                 max_batch_delay: float = 0.0, in_thread: bool = False) -> None:  # fmt: skip
        self.predictor = predictor
        self.metrics = metrics
        self.max_rows = max(1, max_batch_size)
        self.max_delay = max(0.0, max_batch_delay)
        self.pending: deque[_Item] = deque()
        self.pending_rows = 0
        self.busy = False
        self.handle: asyncio.Handle | None = None
        self.waited = False
        self.last_requests = 1
        self.executor = (
            ThreadPoolExecutor(1, thread_name_prefix="predict", initializer=configure_frameworks) if in_thread else None
        )

    async def predict(self, x: np.ndarray, outputs: tuple[str, ...]) -> dict[str, np.ndarray]:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.pending.append(_Item(x, outputs, future))
        self.pending_rows += len(x)
        if not self.busy and (self.handle is None or self.pending_rows >= self.max_rows):
            self._schedule(loop, 0.0)
        return await future

    def _schedule(self, loop: asyncio.AbstractEventLoop, delay: float) -> None:
        if self.handle is not None:
            self.handle.cancel()
        self.handle = loop.call_later(delay, self._flush) if delay else loop.call_soon(self._flush)

    def _flush(self) -> None:
        self.handle = None
        if self.busy or not self.pending:
            return
        loop = asyncio.get_running_loop()
        under_load = len(self.pending) > 1 or self.last_requests > 1
        if self.max_delay and under_load and not self.waited and self.pending_rows < self.max_rows:
            self.waited = True
            self.metrics.batch_waits += 1
            self._schedule(loop, self.max_delay)
            return
        self.waited = False
        batch = self._take()
        self.last_requests = len(batch)
        if self.executor is None:
            self._finish(batch, self._run(batch))
            if self.pending:
                self._schedule(loop, 0.0)
            return
        self.busy = True
        done = loop.run_in_executor(self.executor, self._run, batch)
        done.add_done_callback(lambda f: self._thread_done(loop, batch, f))

    def _thread_done(self, loop: asyncio.AbstractEventLoop, batch: list[_Item], done: asyncio.Future) -> None:
        self.busy = False
        outcome = done.result() if not done.cancelled() and done.exception() is None else ModelError("cancelled")
        self._finish(batch, outcome)
        if self.pending:
            self.waited = True  # they waited a whole predict already: no extra delay
            self._schedule(loop, 0.0)

    def _take(self) -> list[_Item]:
        """The next batch: queued requests in order up to max rows (at least one), of one row shape."""
        first = self.pending.popleft()
        batch, rows = [first], len(first.x)
        while self.pending:
            item = self.pending[0]
            if rows + len(item.x) > self.max_rows or item.x.shape[1:] != first.x.shape[1:]:
                break
            batch.append(self.pending.popleft())
            rows += len(item.x)
        self.pending_rows -= rows
        return batch

    def _run(self, batch: list[_Item]) -> Any:
        """Predict the batch (on the loop or the worker thread): (results, seconds) or, when the batch
        fails, each request on its own so that one bad request fails alone."""
        names = tuple(dict.fromkeys(name for item in batch for name in item.outputs))
        x = batch[0].x if len(batch) == 1 else np.concatenate([item.x for item in batch])
        started = time.perf_counter()
        try:
            results = self.predictor.run(x, names)
            _check_rows(results, len(x))
            return results, time.perf_counter() - started
        except Exception as exc:
            if len(batch) == 1:
                return _classify(exc)
        return [self._run_alone(item) for item in batch]

    def _run_alone(self, item: _Item) -> Any:
        try:
            results = self.predictor.run(item.x, item.outputs)
            _check_rows(results, len(item.x))
            return results
        except Exception as exc:
            return _classify(exc)

    def _finish(self, batch: list[_Item], outcome: Any) -> None:
        if isinstance(outcome, Exception):
            _settle(batch[0].future, outcome)
            return
        if isinstance(outcome, list):  # the batch failed and was retried request by request
            for item, result in zip(batch, outcome, strict=True):
                _settle(item.future, result)
            return
        results, seconds = outcome
        start = 0
        for item in batch:
            end = start + len(item.x)
            _settle(item.future, {name: results[name][start:end] for name in item.outputs})
            start = end
        self.metrics.observe_batch(start, len(batch), seconds)

    def close(self) -> None:
        if self.executor is not None:
            self.executor.shutdown(wait=False, cancel_futures=True)


def _check_rows(results: dict[str, Any], rows: int) -> None:
    for name, value in results.items():
        value = np.asarray(value)
        results[name] = value
        if value.ndim == 0 or len(value) != rows:
            raise ModelError(f"output {name!r} has {value.shape[:1] or 'no'} rows for {rows} input rows")


def _classify(exc: Exception) -> Exception:
    """Input the model rejects (scikit-learn raises ValueError/TypeError: unseen categories, wrong types) is the
    caller's mistake (400); anything else is the model's (500)."""
    if isinstance(exc, ModelError | BadRequest):
        return exc
    if isinstance(exc, ValueError | TypeError):
        return BadRequest(f"the model rejected the input: {exc}")
    return ModelError(f"{type(exc).__name__}: {exc}")


def _settle(future: asyncio.Future, result: Any) -> None:
    if future.done():  # the request went away meanwhile
        return
    if isinstance(result, Exception):
        future.set_exception(result)
    else:
        future.set_result(result)


def predict_timing(predictor: Predictor, rows: int) -> float | None:
    """Seconds of one predict on `rows` rows (None when the model cannot be probed with zeros)."""
    try:
        return predictor.probe(rows)
    except Exception:
        return None
