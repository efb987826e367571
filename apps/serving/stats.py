"""Traffic of the serving router, per revision: request count, errors, latency histogram, concurrency.

Three views of the same counts:
- Prometheus (`portal_serving_*`, collected from the default registry, so the portal's `/metrics` served by
  django_prometheus in the same process shows them): requests by outcome (`ok`, `client_error` = 4xx,
  `error` = 5xx or the replica unreachable) and kind (`live`, or `shadow` for mirrored copies), latency
  histogram, requests in flight, retries, dropped shadow copies, 503s for want of a ready replica.
- Per-minute rows (`RevisionTraffic`), one per revision, minute and web process, for the charts: `series()`.
- In-flight samples (`ConcurrencySample`): each process integrates its requests in flight over time and
  writes the integral every `PORTAL_SERVING_ROUTER_FLUSH_S` seconds; `concurrency()` sums them across
  processes (what the autoscaler reads). Both live in the database, so they work on the embedded default
  without Redis.

The router counts on its event loop's thread (`RevisionMeter.begin/end`: plain integer operations — the
Prometheus series are read from the same integers at scrape time by `MeterCollector`, because the client
library's locked counters and histograms cost more per request than the rest of the counting); a flusher task
on the same loop takes a snapshot there and writes it from a worker thread, so no count is lost between a
read and a reset.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import close_old_connections
from django.db.models import Sum
from prometheus_client import REGISTRY, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from apps.serving import payloads

logger = logging.getLogger(__name__)

# Latency bucket upper bounds (ms) of the histograms; the last bucket is everything above.
BOUNDS_MS = (1, 2, 3, 5, 7.5, 10, 15, 20, 30, 50, 75, 100, 150, 200, 300, 500, 750, 1000, 2000, 5000, 10000, 30000)
SAMPLES_KEPT = timedelta(minutes=10)  # concurrency samples: enough for any autoscaling window
PRUNE_EVERY = 60.0  # seconds between deletions of old rows (by each web process; idempotent)
KINDS = ("live", "shadow")
OUTCOMES = ("ok", "client_error", "error")

LABELS = ["project", "service", "revision"]
SHADOW_DROPPED = Counter(
    "portal_serving_shadow_dropped", "Shadow copies not sent: too many already in flight", ["project", "service"]
)
UNAVAILABLE = Counter("portal_serving_unavailable", "Requests answered 503: no ready replica", ["project", "service"])


def source_name() -> str:
    """This web process, as its stored rows name it."""
    return f"{socket.gethostname()}:{os.getpid()}"[:100]


@dataclass
class _Minute:
    """One revision's counts in one minute, in this process."""

    requests: int = 0
    errors: int = 0
    client_errors: int = 0
    mirrored: int = 0
    latency_sum_ms: float = 0.0
    buckets: list[int] = field(default_factory=lambda: [0] * (len(BOUNDS_MS) + 1))
    dirty: bool = False


class RevisionMeter:
    """Counts of one revision in this process (changed on the event loop's thread only)."""

    def __init__(self, revision_id: int, number: int, project: str, service: str) -> None:
        self.revision_id = revision_id
        self.labels = [project, service, str(number)]
        # Since the process started (Prometheus): requests per (kind, outcome), latency per kind.
        self.outcomes = {(kind, outcome): 0 for kind in KINDS for outcome in OUTCOMES}
        self.buckets = {kind: [0] * (len(BOUNDS_MS) + 1) for kind in KINDS}
        self.seconds = dict.fromkeys(KINDS, 0.0)
        self.retries = 0
        self.inflight = 0
        self.busy = 0.0  # ∫ in-flight dt since the last sample (request-seconds)
        self._since = time.monotonic()
        self.minutes: dict[int, _Minute] = {}

    def _integrate(self, now: float) -> None:
        self.busy += self.inflight * (now - self._since)
        self._since = now

    def begin(self) -> float:
        """A request to this revision starts; returns its start time for `end`."""
        now = time.monotonic()
        self._integrate(now)
        self.inflight += 1
        return now

    def abandon(self, started: float) -> None:
        """It ended without an answer worth counting: the router sends it to another replica."""
        self._integrate(time.monotonic())
        self.inflight -= 1
        self.retries += 1

    def end(self, started: float, status: int, *, mirrored: bool = False) -> None:
        """It ended with `status` (0: no answer from the replica, counted as an error)."""
        now = time.monotonic()
        self._integrate(now)
        self.inflight -= 1
        seconds = now - started
        outcome = "error" if status >= 500 or status == 0 else "client_error" if status >= 400 else "ok"
        kind = "shadow" if mirrored else "live"
        self.outcomes[kind, outcome] += 1
        ms = seconds * 1000
        bucket = bisect_left(BOUNDS_MS, ms)
        self.buckets[kind][bucket] += 1
        self.seconds[kind] += seconds
        minute_key = int(time.time() // 60)
        minute = self.minutes.get(minute_key)
        if minute is None:
            minute = self.minutes[minute_key] = _Minute()
        minute.requests += 1
        minute.errors += outcome == "error"
        minute.client_errors += outcome == "client_error"
        minute.mirrored += mirrored
        minute.latency_sum_ms += ms
        minute.buckets[bucket] += 1
        minute.dirty = True


class MeterCollector(Collector):
    """The meters as Prometheus series, read at scrape time."""

    def collect(self) -> Iterator[Any]:
        requests = CounterMetricFamily(
            "portal_serving_requests",
            "Requests the serving router sent to a revision",
            labels=[*LABELS, "kind", "outcome"],
        )
        latency = HistogramMetricFamily(
            "portal_serving_request_duration_seconds",
            "From the router's forward to the last byte of the answer",
            labels=[*LABELS, "kind"],
        )
        inflight = GaugeMetricFamily(
            "portal_serving_inflight_requests", "Requests in flight to a revision", labels=LABELS
        )
        retries = CounterMetricFamily(
            "portal_serving_retries", "Requests sent to another replica after a failed attempt", labels=LABELS
        )
        bounds = [*(str(b / 1000) for b in BOUNDS_MS), "+Inf"]
        for m in list(_meters.values()):
            for (kind, outcome), count in list(m.outcomes.items()):
                if count:
                    requests.add_metric([*m.labels, kind, outcome], count)
            for kind in KINDS:
                counts = list(m.buckets[kind])
                if any(counts):
                    running, cumulative = 0, []
                    for bound, count in zip(bounds, counts, strict=True):
                        running += count
                        cumulative.append((bound, running))
                    latency.add_metric([*m.labels, kind], cumulative, m.seconds[kind])
            inflight.add_metric(m.labels, m.inflight)
            retries.add_metric(m.labels, m.retries)
        yield from (requests, latency, inflight, retries)

    def describe(self) -> Iterator[Any]:
        return iter(())  # no fixed series: collect() runs at scrape time only


_meters: dict[int, RevisionMeter] = {}
_meters_lock = threading.Lock()


_collector = MeterCollector()
REGISTRY.register(_collector)


def meter(revision_id: int, number: int, project: str, service: str) -> RevisionMeter:
    found = _meters.get(revision_id)
    if found is None:
        with _meters_lock:
            found = RevisionMeter(revision_id, number, project, service)
            for other in [k for k, m in _meters.items() if m.labels == found.labels]:
                del _meters[other]  # a deleted service's revision under the same name: one series per label set
            found = _meters.setdefault(revision_id, found)
    return found


def reset() -> None:
    """Forget every meter and what it has not written (tests whose rolled-back revisions reuse ids)."""
    with _meters_lock:
        _meters.clear()


# --- writing -------------------------------------------------------------------------------------------


@dataclass
class Snapshot:
    at: datetime
    samples: list[tuple[int, float]]  # (revision id, request-seconds in flight during the interval)
    minutes: list[tuple[int, int, _Minute]]  # (revision id, minute key, counts)


def snapshot() -> Snapshot:
    """Take (and reset) what the meters counted since the last snapshot; call on the counting thread."""
    now = time.monotonic()
    current_minute = int(time.time() // 60)
    samples, minutes = [], []
    for m in list(_meters.values()):
        m._integrate(now)
        if m.busy > 0:
            samples.append((m.revision_id, m.busy))
            m.busy = 0.0
        for key, counts in list(m.minutes.items()):
            if counts.dirty:
                counts.dirty = False
                minutes.append((m.revision_id, key, _Minute(**{**counts.__dict__, "buckets": list(counts.buckets)})))
            if key < current_minute:
                del m.minutes[key]  # final: written now (or just before)
    return Snapshot(datetime.now(UTC), samples, minutes)


_last_prune = 0.0


def write(snap: Snapshot, source: str | None = None) -> None:
    """Store a snapshot (a worker thread's or a test's job): upsert this process's minute rows, add samples."""
    from apps.serving.models import ConcurrencySample, Revision, RevisionTraffic

    global _last_prune
    if not snap.samples and not snap.minutes:
        return
    source = source or source_name()
    wanted = {rev for rev, _ in snap.samples} | {rev for rev, _, _ in snap.minutes}
    alive = set(Revision.objects.filter(pk__in=wanted).values_list("pk", flat=True))
    for gone in wanted - alive:  # deleted revision: forget its counts (its Prometheus series go with them)
        _meters.pop(gone, None)
    ConcurrencySample.objects.bulk_create(
        ConcurrencySample(revision_id=rev, source=source, at=snap.at, busy_seconds=busy)
        for rev, busy in snap.samples
        if rev in alive
    )
    rows = [
        RevisionTraffic(
            revision_id=rev,
            minute=datetime.fromtimestamp(key * 60, UTC),
            source=source,
            requests=c.requests,
            errors=c.errors,
            client_errors=c.client_errors,
            mirrored=c.mirrored,
            latency_sum_ms=c.latency_sum_ms,
            latency_buckets=c.buckets,
        )
        for rev, key, c in snap.minutes
        if rev in alive
    ]
    RevisionTraffic.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=["revision", "minute", "source"],
        update_fields=["requests", "errors", "client_errors", "mirrored", "latency_sum_ms", "latency_buckets"],
    )
    if time.monotonic() - _last_prune > PRUNE_EVERY:
        _last_prune = time.monotonic()
        now = datetime.now(UTC)
        ConcurrencySample.objects.filter(at__lt=now - SAMPLES_KEPT).delete()
        RevisionTraffic.objects.filter(
            minute__lt=now - timedelta(days=settings.PORTAL_SERVING_ROUTER_STATS_DAYS)
        ).delete()


def flush_now() -> None:
    """Snapshot and store at once, on this thread (tests; or a process about to exit). Only while no request
    is being counted on another thread."""
    write(snapshot())


def _write_in_thread(snap: Snapshot) -> None:
    close_old_connections()
    try:
        write(snap)
    except Exception:  # the next flush writes the next minute's rows; a failed one must not stop the loop
        logger.exception("serving stats: could not store %d sample(s)", len(snap.samples))
    finally:
        close_old_connections()


_flusher: asyncio.Task[None] | None = None


async def _flush_forever(every: float) -> None:
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(every)
        await loop.run_in_executor(None, _write_in_thread, snapshot())
        if payloads.pending():
            await loop.run_in_executor(None, payloads.flush_in_thread)


def ensure_flusher() -> None:
    """Start the flusher on the running loop unless one runs (the router calls this on every request)."""
    global _flusher
    if _flusher is not None and not _flusher.done() and not _flusher.get_loop().is_closed():
        return
    _flusher = asyncio.get_running_loop().create_task(
        _flush_forever(settings.PORTAL_SERVING_ROUTER_FLUSH_S), name="serving-stats-flusher"
    )


# --- reading -------------------------------------------------------------------------------------------


def concurrency(revision_id: int, window_s: float = 30) -> float:
    """Requests in flight to the revision, averaged over the last `window_s` seconds and summed across web
    processes. Lags by up to one flush interval; a window shorter than a few intervals is noisy."""
    from apps.serving.models import ConcurrencySample

    since = datetime.now(UTC) - timedelta(seconds=window_s)
    busy = ConcurrencySample.objects.filter(revision_id=revision_id, at__gt=since).aggregate(s=Sum("busy_seconds"))
    return (busy["s"] or 0.0) / window_s


def quantile(buckets: list[int], q: float) -> float | None:
    """The q-quantile (ms) of a stored histogram, interpolated inside its bucket; None when empty."""
    total = sum(buckets)
    if total == 0:
        return None
    rank, running = q * total, 0
    for i, count in enumerate(buckets):
        if count and running + count >= rank:
            if i == len(BOUNDS_MS):
                return float(BOUNDS_MS[-1])
            low = BOUNDS_MS[i - 1] if i else 0.0
            return round(low + (BOUNDS_MS[i] - low) * (rank - running) / count, 3)
        running += count
    return float(BOUNDS_MS[-1])  # pragma: no cover - rank ≤ total


def series(service: Any, *, minutes: int = 60) -> dict[int, dict[str, list]]:
    """Per revision number: one point per minute of the last `minutes` (oldest first, minutes without traffic
    included) with "t" (ISO start of the minute), "requests", "errors" (5xx and unreachable), "client_errors"
    (4xx), "p50_ms" and "p99_ms" (None without requests). Only revisions with traffic in the range appear."""
    from apps.serving.models import RevisionTraffic

    end = int(time.time() // 60) + 1
    start = end - minutes
    rows = RevisionTraffic.objects.filter(
        revision__service=service, minute__gte=datetime.fromtimestamp(start * 60, UTC)
    ).values_list("revision__number", "minute", "requests", "errors", "client_errors", "latency_buckets")
    merged: dict[int, dict[int, list]] = {}
    for number, minute, requests, errors, client_errors, buckets in rows:
        key = int(minute.timestamp() // 60)
        point = merged.setdefault(number, {}).setdefault(key, [0, 0, 0, [0] * (len(BOUNDS_MS) + 1)])
        point[0] += requests
        point[1] += errors
        point[2] += client_errors
        for i, count in enumerate(buckets[: len(point[3])]):
            point[3][i] += count
    result: dict[int, dict[str, list]] = {}
    for number in sorted(merged):
        out: dict[str, list] = {"t": [], "requests": [], "errors": [], "client_errors": [], "p50_ms": [], "p99_ms": []}
        for key in range(start, end):
            requests, errors, client_errors, buckets = merged[number].get(key, (0, 0, 0, []))
            out["t"].append(datetime.fromtimestamp(key * 60, UTC).isoformat())
            out["requests"].append(requests)
            out["errors"].append(errors)
            out["client_errors"].append(client_errors)
            out["p50_ms"].append(quantile(buckets, 0.5) if buckets else None)
            out["p99_ms"].append(quantile(buckets, 0.99) if buckets else None)
        result[number] = out
    return result
