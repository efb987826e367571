"""Celery entry points of notebooks. Each takes ids and is safe to run twice."""

from __future__ import annotations

import time

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from apps.notebooks import culler, services
from apps.notebooks.models import Notebook

POLL_SECONDS = 0.25
TASK_SECONDS = 20.0  # one task waits this long, then hands over to a later one (a worker is not held for minutes)


@shared_task(ignore_result=True)
def await_ready(pk: int, handle: str) -> None:
    """Poll a starting server until it answers (then RUNNING); the start timeout is the culler's to enforce."""
    until = time.monotonic() + TASK_SECONDS
    while time.monotonic() < until:
        nb = Notebook.objects.filter(pk=pk, handle=handle, status=Notebook.Status.STARTING).first()
        if nb is None:
            return  # running, stopped or failed meanwhile, or another server now
        if services.ready(nb):
            services.mark_running(pk, handle)
            return
        if (timezone.now() - nb.started_at).total_seconds() > settings.PORTAL_NOTEBOOK_START_TIMEOUT:
            return
        time.sleep(POLL_SECONDS)
    await_ready.apply_async((pk, handle), countdown=1)


@shared_task(ignore_result=True)
def cull_notebooks() -> None:
    culler.cull_idle_notebooks()
