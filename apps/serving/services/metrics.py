"""Traffic of a service for its pages and the API, from the router's per-minute counts (apps.serving.stats)."""

from __future__ import annotations

from typing import Any

from apps.serving.models import InferenceService


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
