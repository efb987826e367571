"""Stopping, starting and deleting a service, and its key."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.accounts.models import hash_token
from apps.runtime.base import get_runtime
from apps.serving import replicas as replica_ops
from apps.serving.models import InferenceService, Replica, Revision
from apps.serving.services.deploy import deploy, lock_service, placement
from apps.serving.services.events import publish_deleted, publish_service
from apps.serving.services.rollout import advance, retire


def stop_service(service: InferenceService, reason: str = "") -> InferenceService:
    """Stop every replica; the revisions and pointers stay, so `start_service` serves the same again."""
    with transaction.atomic():
        service = lock_service(service)
        service.status, service.reason = InferenceService.Status.STOPPED, reason
        service.updated_at = timezone.now()
        service.save(update_fields=["status", "reason", "updated_at"])
        for revision in service.revisions.filter(status=Revision.Status.ROLLING_OUT):
            retire(revision, _("the service was stopped"), drain=False)
        live = Replica.objects.filter(revision__service=service, status__in=replica_ops.LIVE)
        replica_ops.stop_replicas(list(live), _("the service was stopped"), drain=False)
        transaction.on_commit(lambda: publish_service(service))
    return service


def start_service(service: InferenceService, user: Any) -> InferenceService:
    """Serve again what served before the stop (or deploy, when nothing has yet)."""
    with transaction.atomic():
        service = lock_service(service)
        if service.status != InferenceService.Status.STOPPED:
            return service
        if service.current_revision_id is None:
            service.status = InferenceService.Status.PENDING
            service.save(update_fields=["status"])
            start_fresh = True
        else:
            placement(service)  # refuses at once when no agent (or cluster) can run it
            service.status, service.reason = InferenceService.Status.DEPLOYING, ""
            service.save(update_fields=["status", "reason"])
            wanted = max(service.min_replicas, 1)
            service.revisions.filter(status=Revision.Status.READY).update(desired_replicas=wanted, low_since=None)
            start_fresh = False
    if start_fresh:
        deploy(service, user)
    return advance(service.pk, changed=True) or service


def delete_service(service: InferenceService) -> None:
    """Stop everything at once and forget the service, its revisions and replicas."""
    with transaction.atomic():
        service = lock_service(service)
        for replica in (
            Replica.objects.filter(revision__service=service)
            .exclude(status__in=[Replica.Status.STOPPED, Replica.Status.FAILED])
            .select_related("revision")
        ):
            if replica.handle:
                get_runtime(replica.revision.config.get("runtime") or "local").cancel(replica.handle)
        InferenceService.objects.filter(pk=service.pk).update(
            current_revision=None, canary_revision=None, shadow_revision=None
        )
        project_id, service_id = service.project_id, service.pk
        service.delete()
        transaction.on_commit(lambda: publish_deleted(project_id, service_id))


def delete_project_services(project: Any) -> None:
    """A project is being deleted (inside its transaction): every service stops and goes, so none is left serving
    and none still points at the project's models (they are PROTECTed). Its folders go once that commits."""
    for service in InferenceService.objects.filter(project=project):
        delete_service(service)
    folder = Path(settings.PORTAL_WORK_DIR) / "serving" / project.slug  # the parent of replicas.revision_dir's
    transaction.on_commit(lambda: shutil.rmtree(folder, ignore_errors=True))


def rotate_key(service: InferenceService) -> str:
    """A new service key (the old one stops working); returned once, only its digest is kept."""
    key = InferenceService.generate_key()
    InferenceService.objects.filter(pk=service.pk).update(key_prefix=key[:12], key_digest=hash_token(key))
    service.refresh_from_db(fields=["key_prefix", "key_digest"])
    return key
