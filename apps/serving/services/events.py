"""What the service pages are told when a service changes (over the project's events socket, apps/projects/events.py).

`state_of(service)` is what those pages show of a service that moves (status, reason, the revisions that serve or
roll out and their replicas): the state machine compares it before and after a pass, so the periodic reconcile,
which usually changes nothing, tells nobody anything.
"""

from __future__ import annotations

from typing import Any

from apps.projects.events import publish_event
from apps.serving.models import InferenceService, Replica, Revision

TRANSITIONAL = (InferenceService.Status.DEPLOYING, InferenceService.Status.DEGRADED)
ACTIVE = (Revision.Status.ROLLING_OUT, Revision.Status.READY)


def state_of(service: InferenceService) -> tuple[Any, ...]:
    revisions = service.revisions.filter(status__in=ACTIVE).order_by("pk")
    replicas = Replica.objects.filter(revision__service=service, revision__status__in=ACTIVE).order_by("pk")
    return (
        service.status,
        service.reason,
        service.current_revision_id,
        service.canary_revision_id,
        service.shadow_revision_id,
        service.canary_percent,
        service.shadow_percent,
        tuple(revisions.values_list("pk", "status", "role", "desired_replicas", "traffic_percent")),
        tuple(replicas.values_list("pk", "status")),
    )


def publish_service(service: InferenceService) -> None:
    """Tell the project's open pages how the service is now. `settled`: nothing rolls out or waits for replicas
    (the service page then redraws what depends on what serves: the console, the revisions, the controls)."""
    rolling = service.revisions.filter(status=Revision.Status.ROLLING_OUT).exists()
    publish_event(
        service.project_id,
        "service",
        service.pk,
        status=service.status,
        reason=service.reason,
        rolling=rolling,
        settled=not rolling and service.status not in TRANSITIONAL,
    )


def publish_deleted(project_id: int, service_id: int) -> None:
    publish_event(project_id, "service", service_id, status="deleted", reason="", rolling=False, settled=True)
