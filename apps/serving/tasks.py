"""Celery entry points of serving. Each takes ids and is safe to run twice; the periodic `reconcile` repairs
whatever an event that never arrived (or a task that never ran) left undone."""

from __future__ import annotations

import time

from celery import shared_task
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.utils import timezone

from apps.serving import autoscale as autoscaler
from apps.serving import replicas
from apps.serving.models import InferenceService, Replica
from apps.serving.services import deploy, rollout
from apps.serving.services import follow_alias as roll_followers

POLL_SECONDS = 0.2
DEPLOY_RETRY_SECONDS = 5
TASK_SECONDS = 20.0  # one task waits this long, then hands over to a later one (a worker is not held for minutes)


@shared_task(ignore_result=True)
def await_ready(replica_id: int) -> None:
    """Probe a starting replica until it answers /v2/health/ready (then READY); the rollout's timeout is the
    state machine's to enforce."""
    until = time.monotonic() + TASK_SECONDS
    while time.monotonic() < until:
        replica = (
            Replica.objects.filter(pk=replica_id, status=Replica.Status.STARTING).select_related("revision").first()
        )
        if replica is None:
            return  # ready, stopped or failed meanwhile
        if replicas.probe_ready(replica.upstream):
            rollout.mark_ready(replica_id)
            return
        if (timezone.now() - replica.started_at).total_seconds() > settings.PORTAL_SERVING_READY_TIMEOUT:
            rollout.advance(replica.revision.service_id)  # rolls the revision back, saying why
            return
        time.sleep(POLL_SECONDS)
    await_ready.apply_async((replica_id,), countdown=1)


@shared_task(ignore_result=True)
def cancel_replicas(replica_ids: list[int]) -> None:
    """Stop the processes of replicas that have drained."""
    replicas.cancel_due(replica_ids, force=True)
    for service_id in set(Replica.objects.filter(pk__in=replica_ids).values_list("revision__service_id", flat=True)):
        rollout.advance(service_id, changed=True)  # drained replicas stopped


@shared_task(ignore_result=True)
def reconcile() -> dict[str, int]:
    return rollout.reconcile()


@shared_task(ignore_result=True)
def autoscale() -> None:
    autoscaler.autoscale()


@shared_task(ignore_result=True)
def follow_alias(registered_model_id: int, alias: str) -> list[int]:
    """Roll the services following `alias` of the registered model to the version it points at now."""
    return [revision.pk for revision in roll_followers(registered_model_id, alias)]


@shared_task(ignore_result=True)
def deploy_when_possible(service_id: int, user_id: int | None, until: float) -> None:
    """Deploy a service made while nothing could run it yet — the demo's chat service: `manage.py demo` runs before
    `make run` starts the agent. Tried every DEPLOY_RETRY_SECONDS until `until` (a Unix time); then the service says
    why it waits (a deploy from its page starts it). A service deployed meanwhile, or deleted, is left alone."""
    service = InferenceService.objects.filter(pk=service_id, current_revision=None).first()
    if service is None or service.status not in (InferenceService.Status.PENDING, InferenceService.Status.FAILED):
        return
    user = get_user_model().objects.filter(pk=user_id).first() if user_id else None
    try:
        deploy(service, user)
    except ValidationError as exc:
        if time.time() < until:
            deploy_when_possible.apply_async((service_id, user_id, until), countdown=DEPLOY_RETRY_SECONDS)
        else:
            InferenceService.objects.filter(pk=service_id).update(reason=" ".join(exc.messages))
