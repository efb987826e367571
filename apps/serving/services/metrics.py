"""Traffic of a service for its pages and the API, from the router's per-minute counts (apps.serving.stats)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from apps.serving.models import InferenceService, RevisionTraffic


def _series(service: InferenceService, minutes: int) -> dict[int, dict[str, list]]:
    try:
        from apps.serving.stats import series
    except ImportError:  # the router's statistics are not installed: no traffic known
        return {}
    return series(service, minutes=minutes)


def traffic_series(service: InferenceService, minutes: int = 60) -> dict[str, Any]:
    """{"minutes": n, "revisions": {number: {"t", "requests", "errors", "p50_ms", "p99_ms", …}}} for the charts."""
    return {"minutes": minutes, "revisions": {str(k): v for k, v in _series(service, minutes).items()}}


def requests_per_second(service: InferenceService) -> float | None:
    """Requests per second over the last full minute, all revisions together (None: nothing counted)."""
    revisions = _series(service, 2)
    if not revisions:
        return None
    total = 0
    for points in revisions.values():
        counts = points.get("requests") or []
        total += counts[-2] if len(counts) >= 2 else (counts[-1] if counts else 0)
    return round(total / 60, 2)


def requests_per_second_by_service(services: list[InferenceService]) -> dict[int, float | None]:
    """`requests_per_second` of each service of a list, in one query: {service id: requests/s or None}."""
    end = int(time.time() // 60) + 1
    last_full = end - 2  # the last full minute, as requests_per_second counts
    rows = RevisionTraffic.objects.filter(
        revision__service__in=services,
        minute__gte=datetime.fromtimestamp(last_full * 60, UTC),
        minute__lt=datetime.fromtimestamp(end * 60, UTC),
    ).values_list("revision__service_id", "minute", "requests")
    totals: dict[int, int] = {}
    for service_id, minute, requests in rows:
        totals.setdefault(service_id, 0)
        if int(minute.timestamp() // 60) == last_full:
            totals[service_id] += requests
    return {s.pk: round(totals[s.pk] / 60, 2) if s.pk in totals else None for s in services}
