"""The monitoring part of `manage.py demo`: a drift monitor on the `iris` service, whose reference is found through
lineage (the version the demo pipeline's training step read of the iris dataset), checked every few minutes. The
service logs every request for it (payload logging at 100 %, the demo's traffic being small)."""

from __future__ import annotations

from typing import Any

from apps.monitoring.models import DriftMonitor
from apps.monitoring.services import create_monitor
from apps.projects.models import Project
from apps.serving.models import InferenceService
from apps.serving.services import update_service


def populate(project: Project, user: Any, service: InferenceService | None) -> DriftMonitor | None:
    """Idempotently: payload logging on `service` and its drift monitor (None without the service)."""
    if service is None:
        return None
    existing = DriftMonitor.objects.filter(service=service).first()
    if existing is not None:
        return existing
    if not service.payload_log_percent:
        update_service(service, payload_log_percent=100)
    return create_monitor(
        project, user, service=service, target_column="species", threshold=0.2, window_hours=24, min_rows=20,
        interval_minutes=5,
    )  # fmt: skip
