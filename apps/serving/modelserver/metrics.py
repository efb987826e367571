"""Counters of one model-server process, rendered as Prometheus text at GET /metrics (what the portal's router
and autoscaler scrape). Plain integers on the event loop's thread: no locks, no client library. With
--workers N each worker process counts its own (the `pid` of modelserver_info tells them apart); the control
plane runs one process per replica."""

from __future__ import annotations

import os
from bisect import bisect_left
from collections import Counter

SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
COUNTS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"


class Histogram:
    """A Prometheus histogram: counts per upper bound (+Inf last), sum and count."""

    __slots__ = ("bounds", "count", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def render(self, name: str, labels: str) -> list[str]:
        lines, running = [], 0
        for bound, count in zip((*self.bounds, "+Inf"), self.counts, strict=True):
            running += count
            lines.append(f'{name}_bucket{{{labels},le="{bound}"}} {running}')
        lines.append(f"{name}_sum{{{labels}}} {self.total:.6f}")
        lines.append(f"{name}_count{{{labels}}} {self.count}")
        return lines


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Metrics:
    """What one process has done: inference requests by status code and their latency, errors by kind,
    batches (rows and requests per predict call, predict time) and the requests in flight."""

    def __init__(self, model: str, version: str, platform: str) -> None:
        self.model, self.version, self.platform = model, version, platform
        self.requests: Counter[int] = Counter()
        self.errors: Counter[str] = Counter()
        self.request_seconds = Histogram(SECONDS)
        self.predict_seconds = Histogram(SECONDS)
        self.batch_rows = Histogram(COUNTS)
        self.batch_requests = Histogram(COUNTS)
        self.rows = 0
        self.batch_waits = 0
        self.inflight = 0

    def observe_batch(self, rows: int, requests: int, seconds: float) -> None:
        self.batch_rows.observe(rows)
        self.batch_requests.observe(requests)
        self.predict_seconds.observe(seconds)
        self.rows += rows

    def render(self) -> bytes:
        m = f'model="{_label(self.model)}"'
        info = f'{m},version="{_label(self.version)}",platform="{_label(self.platform)}",pid="{os.getpid()}"'
        lines = [
            "# HELP modelserver_info The model this process serves.",
            "# TYPE modelserver_info gauge",
            f"modelserver_info{{{info}}} 1",
            "# HELP modelserver_requests_total Inference requests answered, by HTTP status code.",
            "# TYPE modelserver_requests_total counter",
            *(f'modelserver_requests_total{{{m},code="{code}"}} {n}' for code, n in sorted(self.requests.items())),
            "# HELP modelserver_errors_total Inference requests that failed: bad_input (400), model_error (500).",
            "# TYPE modelserver_errors_total counter",
            *(f'modelserver_errors_total{{{m},kind="{kind}"}} {n}' for kind, n in sorted(self.errors.items())),
            "# HELP modelserver_inflight_requests Inference requests received and not yet answered.",
            "# TYPE modelserver_inflight_requests gauge",
            f"modelserver_inflight_requests{{{m}}} {self.inflight}",
            "# HELP modelserver_rows_total Rows predicted.",
            "# TYPE modelserver_rows_total counter",
            f"modelserver_rows_total{{{m}}} {self.rows}",
            "# HELP modelserver_batch_waits_total Times a batch was held back (up to max_batch_delay) to fill up.",
            "# TYPE modelserver_batch_waits_total counter",
            f"modelserver_batch_waits_total{{{m}}} {self.batch_waits}",
            "# HELP modelserver_request_duration_seconds Inference request latency inside the server.",
            "# TYPE modelserver_request_duration_seconds histogram",
            *self.request_seconds.render("modelserver_request_duration_seconds", m),
            "# HELP modelserver_batch_rows Rows per predict call (adaptive batching).",
            "# TYPE modelserver_batch_rows histogram",
            *self.batch_rows.render("modelserver_batch_rows", m),
            "# HELP modelserver_batch_requests Requests coalesced into one predict call.",
            "# TYPE modelserver_batch_requests histogram",
            *self.batch_requests.render("modelserver_batch_requests", m),
            "# HELP modelserver_predict_duration_seconds Time of one predict call.",
            "# TYPE modelserver_predict_duration_seconds histogram",
            *self.predict_seconds.render("modelserver_predict_duration_seconds", m),
        ]
        return ("\n".join(lines) + "\n").encode()
