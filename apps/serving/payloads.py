"""Payload logging: a sampled share of a service's inference requests, kept with their answers (docs/monitoring.md).

The router decides per request (`ServiceRoute.sample()`, a smooth counter like the canary's: of N consecutive POSTs
⌊N·p/100⌋ or ⌈N·p/100⌉ are logged), gives a logged request an id (`X-Portal-Request-Id` on the answer) and appends a
`Sample` to an in-process buffer: no database work, no parsing and no copying on the request's path (the bodies are
the bytes the router holds anyway). The stats flusher (apps/serving/stats.py) hands the buffer to `flush()` on a
worker thread every PORTAL_SERVING_ROUTER_FLUSH_S seconds, which scrubs, caps and writes the rows in one bulk insert
and trims each revision to the service's `payload_log_keep` newest. The buffer is bounded (BUFFER_MAX samples, the
oldest dropped and counted): a flood outruns the database without growing the process.

Never logged: the caller's credentials (`Authorization`, `Cookie`, `X-Service-Key` never reach this module: the
router drops them before forwarding), any other header whose name says it carries a secret, and the values of JSON
keys that do (`password`, `api_key`, `token`, …, at any depth) in request and answer bodies.

Ground truth arrives later by request id (`record_labels`); `accuracy()` compares it with what the model answered.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from django.core.exceptions import ValidationError
from django.db import close_old_connections, connection
from django.utils import timezone
from django.utils.translation import gettext as _
from prometheus_client import Counter

logger = logging.getLogger(__name__)

BUFFER_MAX = 10_000  # samples waiting for the next flush, per process
MAX_LABELS = 1000  # ground-truth labels per call
# Header names that may carry a secret (any part of the name), and JSON keys that do (the whole key, or its last
# part after "_"/"-": `password`, `db_password`, `api_key`, `access-token`; not `max_tokens`).
SECRET_HEADER = re.compile(r"auth|token|secret|passw|cookie|session|credential|key|signature", re.I)
SECRET_KEY = re.compile(
    r"(?:^|[-_])(?:password|passwd|secret|token|api[-_]?key|access[-_]?key|authorization|cookie|credentials?"
    r"|private[-_]?key|client[-_]?secret)$",
    re.I,
)
REDACTED = "[redacted]"
# A body with none of these bytes has no secret-looking key: it is kept as sent, without parsing it.
SECRET_HINT = re.compile(rb"(?i)passw|secret|token|key|auth|cookie|credential")

DROPPED = Counter(
    "portal_serving_payloads_dropped", "Sampled payloads dropped before being stored (buffer full)", ["project"]
)


@dataclass(slots=True)
class Sample:
    """One logged exchange as the router holds it (raw bytes; scrubbed when flushed)."""

    service_id: int
    revision_id: int
    project: str
    request_id: str
    path: str
    headers: list[tuple[bytes, bytes]]
    request: bytes
    cap: int  # bytes: a larger body keeps its size only
    keep: int
    at: float  # time.time()
    status: int = 0
    response: bytes = b""
    response_size: int = 0


_buffer: deque[Sample] = deque()


def _id_source() -> tuple[str, itertools.count]:
    return os.urandom(8).hex(), itertools.count()


# Request ids: a random prefix per process and a counter (32 hex characters). uuid4() costs a getrandom() call per
# request, 10 µs and more on a busy machine; this costs a counter step. Reseeded in a forked child.
_prefix, _counter = _id_source()


def _reseed() -> None:
    global _prefix, _counter
    _prefix, _counter = _id_source()


os.register_at_fork(after_in_child=_reseed)


def new_request_id() -> str:
    return f"{_prefix}{next(_counter):016x}"


def record(sample: Sample) -> None:
    """Queue a sample for the next flush (the router's event loop; O(1))."""
    if len(_buffer) >= BUFFER_MAX:
        _buffer.popleft()
        DROPPED.labels(sample.project).inc()
    _buffer.append(sample)


def pending() -> int:
    return len(_buffer)


def scrub(value: Any) -> Any:
    """`value` with the values of secret-looking keys replaced, at any depth."""
    if isinstance(value, dict):
        return {k: REDACTED if isinstance(k, str) and SECRET_KEY.search(k) else scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return value


def body_text(raw: bytes, cap: int) -> str:
    """What is kept of a body: "" over the cap or when it is not text; JSON with secret-looking keys redacted."""
    if not raw or len(raw) > cap:
        return ""
    if SECRET_HINT.search(raw):
        try:
            return orjson.dumps(scrub(orjson.loads(raw))).decode()
        except orjson.JSONDecodeError:
            pass
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:  # binary tensors: the size says enough
        return ""


def header_dict(headers: list[tuple[bytes, bytes]]) -> dict[str, str]:
    out = {}
    for name, value in headers:
        key = name.decode("latin-1").lower()
        out[key] = REDACTED if SECRET_HEADER.search(key) else value.decode("latin-1")[:500]
    return out


COLUMNS = (
    "service_id", "revision_id", "request_id", "created_at", "path", "headers", "request", "request_bytes", "status",
    "response", "response_bytes",
)  # fmt: skip


def flush() -> int:
    """Store what the buffer holds (one bulk insert) and trim the revisions written to; returns rows stored."""
    from apps.serving.models import PayloadLog

    samples = []
    while _buffer:
        try:
            samples.append(_buffer.popleft())
        except IndexError:  # emptied by a concurrent flush
            break
    if not samples:
        return 0
    rows = [
        (
            s.service_id, s.revision_id, s.request_id, datetime.fromtimestamp(s.at, UTC), s.path[:500],
            orjson.dumps(header_dict(s.headers)).decode(), body_text(s.request, s.cap), len(s.request), s.status,
            body_text(s.response, s.cap), s.response_size,
        )
        for s in samples
    ]  # fmt: skip
    if connection.vendor == "postgresql":
        # COPY: ~5× fewer CPU seconds per row than bulk_create's UNNEST of parameters (psycopg quotes each array
        # element in Python). Request ids are unique by construction (a random prefix per process and a counter).
        columns = ", ".join(COLUMNS)
        with (
            connection.cursor() as cursor,
            cursor.cursor.copy(f"COPY {PayloadLog._meta.db_table} ({columns}) FROM STDIN") as copy,
        ):
            for row in rows:
                copy.write_row(row)
    else:
        fields = [dict(zip(COLUMNS, row, strict=True)) for row in rows]
        for item in fields:
            item["headers"] = orjson.loads(item["headers"])
        PayloadLog.objects.bulk_create([PayloadLog(**f) for f in fields], batch_size=500, ignore_conflicts=True)
    for revision_id, limit in {s.revision_id: s.keep for s in samples}.items():
        trim(revision_id, limit)
    return len(rows)


def trim(revision_id: int, keep: int) -> None:
    """Delete all but the newest `keep` rows of the revision: one statement below the cutoff row. Raw SQL, because
    Django's delete() loads every row to send pre_delete signals (the audit listens), ~1 ms a row."""
    from apps.serving.models import PayloadLog

    newest = PayloadLog.objects.filter(revision_id=revision_id).order_by("-created_at", "-pk")
    cutoff = newest.values_list("created_at", "pk")[keep : keep + 1]
    cutoff = list(cutoff)
    if not cutoff:
        return
    at, pk = cutoff[0]
    table = PayloadLog._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {table} WHERE revision_id = %s AND (created_at < %s OR (created_at = %s AND id <= %s))",
            [revision_id, at, at, pk],
        )


def flush_in_thread() -> None:
    close_old_connections()
    try:
        flush()
    except Exception:  # the rows of this flush are lost; the loop goes on
        logger.exception("serving payloads: could not store the logged requests")
    finally:
        close_old_connections()


# --- ground truth ------------------------------------------------------------------------------------------


def record_labels(service: Any, labels: Any) -> dict[str, Any]:
    """Attach ground truth to logged requests of `service`: `labels` is a list of {"request_id", "label"} (a label is
    the true class of a one-row request, or a list with one per row). Returns {"updated": n, "unknown": [ids not
    logged for this service]}; a malformed list is a ValidationError keyed `labels`."""
    from apps.serving.models import PayloadLog

    if not isinstance(labels, list) or not labels:
        raise ValidationError({"labels": [_("A non-empty list of {request_id, label} objects.")]})
    if len(labels) > MAX_LABELS:
        raise ValidationError({"labels": [_("At most %(n)d labels per call.") % {"n": MAX_LABELS}]})
    by_id: dict[str, Any] = {}
    for index, item in enumerate(labels):
        well_formed = isinstance(item, dict) and set(item) == {"request_id", "label"}
        if not (well_formed and isinstance(item["request_id"], str)):
            message = _("Item %(i)d: an object with exactly request_id (a string) and label.") % {"i": index}
            raise ValidationError({"labels": [message]})
        if item["label"] is None:
            raise ValidationError({"labels": [_("Item %(i)d: the label is missing.") % {"i": index}]})
        by_id[item["request_id"]] = item["label"]
    found = {log.request_id: log for log in PayloadLog.objects.filter(service=service, request_id__in=list(by_id))}
    now = timezone.now()
    for request_id, log in found.items():
        log.label, log.labelled_at = by_id[request_id], now
    PayloadLog.objects.bulk_update(list(found.values()), ["label", "labelled_at"])
    return {"updated": len(found), "unknown": [r for r in by_id if r not in found]}


def predictions(log: Any) -> list[Any] | None:
    """What the model answered for the logged request: the first output's values, one per row (None if unknown)."""
    if not log.response:
        return None
    try:
        outputs = orjson.loads(log.response).get("outputs") or []
        data = outputs[0]["data"]
    except (orjson.JSONDecodeError, AttributeError, IndexError, KeyError, TypeError):
        return None
    return data if isinstance(data, list) else [data]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) == float(b)
    return str(a) == str(b)


def accuracy(service: Any, *, revision: Any = None, limit: int = 10_000) -> dict[str, Any]:
    """Live accuracy of a classifier from the labelled logged requests (the newest `limit`): {"labelled": rows with
    a label, "correct": rows predicted right, "accuracy": correct / labelled or None}. A row is one prediction: a
    request of n rows with a list of n labels counts n."""
    from apps.serving.models import PayloadLog

    logs = PayloadLog.objects.filter(service=service, label__isnull=False)
    if revision is not None:
        logs = logs.filter(revision=revision)
    labelled = correct = 0
    for log in logs.only("response", "label")[:limit]:
        predicted = predictions(log)
        if predicted is None:
            continue
        truth = log.label if isinstance(log.label, list) else [log.label]
        for p, t in zip(predicted, truth, strict=False):
            labelled += 1
            correct += _same(p, t)
    return {"labelled": labelled, "correct": correct, "accuracy": correct / labelled if labelled else None}
