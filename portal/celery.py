"""The Celery app. Broker: Redis when REDIS_URL is set, otherwise a folder under var/ (no server)."""

from __future__ import annotations

import os
from typing import Any

from celery import Celery
from celery.signals import task_postrun, task_prerun

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")


app.autodiscover_tasks()


@task_prerun.connect
@task_postrun.connect
def _recycle_connections(**kwargs: Any) -> None:
    """Django's own rule for long-lived processes, as for requests: keep a connection until CONN_MAX_AGE
    (DB_CONN_MAX_AGE) or an error, and health-check it before reuse. Celery's Django fix-up otherwise closes
    the connection around every task (see CELERY_DB_REUSE_MAX in settings): a new PostgreSQL connection per
    orchestrator event cost more than the event itself."""
    from django.db import close_old_connections

    close_old_connections()
