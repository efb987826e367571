"""Celery entry points of labeling. Each takes ids and is safe to run twice."""

from __future__ import annotations

import logging

from celery import shared_task

from apps.labeling import server, sync
from apps.labeling.client import LabelStudioError, LabelStudioUnavailable
from apps.labeling.models import LabelingProject

logger = logging.getLogger(__name__)


@shared_task(ignore_result=True)
def sync_project(pk: int) -> None:
    """Read one labeling project's progress back from Label Studio (queued by its webhook)."""
    row = LabelingProject.objects.filter(pk=pk, ls_project_id__isnull=False).first()
    if row is None:
        return
    with server.connect() as client:
        sync.sync_project(client, row)


@shared_task(ignore_result=True)
def reconcile() -> None:
    """Every ready project, synced: repairs webhooks lost while the portal or the worker was down. Label Studio
    down: nothing to do until it is back (the next pass catches up)."""
    rows = LabelingProject.objects.filter(status=LabelingProject.Status.READY, ls_project_id__isnull=False)
    try:
        with server.connect() as client:
            for row in rows:
                try:
                    sync.sync_project(client, row)
                except LabelStudioError as exc:
                    logger.warning("labeling project %s not synced: %s", row.pk, exc)
    except LabelStudioUnavailable as exc:
        logger.info("labeling reconcile skipped: %s", exc)


@shared_task(ignore_result=True)
def train(pk: int) -> None:
    """Label Studio's START_TRAINING: export and start the training pipeline, as the member who chose it."""
    from django.core.exceptions import PermissionDenied, ValidationError

    from apps.labeling import training

    row = LabelingProject.objects.filter(pk=pk).select_related("training_pipeline", "training_by").first()
    if row is None or row.training_pipeline is None or row.training_by is None:
        logger.info("labeling project %s: START_TRAINING without a training pipeline, ignored", pk)
        return
    try:
        made = training.train_on_labels(row, row.training_by)
    except (ValidationError, PermissionDenied, LabelStudioError) as exc:
        logger.warning("labeling project %s: START_TRAINING refused: %s", pk, exc)
        return
    logger.info("labeling project %s: START_TRAINING started run %s on %s", pk, made.run_id, made.version.ref)


@shared_task(ignore_result=True)
def complete_demo(project_id: int, user_id: int | None, until: float) -> None:
    """The demo's labeling project, made as Label Studio, the portal and the digits service come up
    (`demo.complete`: it queues itself again while a step must wait)."""
    from apps.labeling import demo

    demo.complete(project_id, user_id, until)
