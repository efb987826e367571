"""Small helpers shared by the tracking and registry pages."""

from __future__ import annotations

import datetime as dt

from django.utils import timezone

from apps.models.models import Run

STATUS_BADGES = {
    "RUNNING": "text-bg-primary",
    "SCHEDULED": "text-bg-secondary",
    "FINISHED": "text-bg-success",
    "FAILED": "text-bg-danger",
    "KILLED": "text-bg-warning",
}


def ms_to_datetime(ms: int | None) -> dt.datetime | None:
    """An aware datetime of a protocol time (integer milliseconds since the epoch)."""
    if ms is None:
        return None
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).astimezone(timezone.get_current_timezone())


def duration(run: Run) -> dt.timedelta | None:
    if run.end_time is None or run.start_time is None:
        return None
    return dt.timedelta(milliseconds=max(run.end_time - run.start_time, 0))


def artifact_base(uri: str) -> str:
    """The storage path (relative to the `artifacts` storage) of an `mlflow-artifacts:/…` location."""
    return uri.removeprefix("mlflow-artifacts:").lstrip("/")


def decorate_run(run: Run) -> Run:
    """Attach what templates show but cannot compute (times as datetimes, badge class, duration)."""
    run.started = ms_to_datetime(run.start_time)  # type: ignore[attr-defined]
    run.ended = ms_to_datetime(run.end_time)  # type: ignore[attr-defined]
    run.badge = STATUS_BADGES.get(run.status, "text-bg-secondary")  # type: ignore[attr-defined]
    run.duration = duration(run)  # type: ignore[attr-defined]
    return run


def format_number(value: float | None) -> str:
    """A metric value for tables: up to 6 significant digits, no scientific notation for ordinary values."""
    if value is None:
        return ""
    if value != value:  # NaN
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "∞" if value > 0 else "-∞"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.6g}"
