"""The Celery app. Broker: Redis when REDIS_URL is set, otherwise a folder under var/ (no server)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
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


def worker_command(
    *,
    pool: str | None = None,
    concurrency: int | None = None,
    queues: Sequence[str] = (),
    include: Sequence[str] = (),
    loglevel: str = "WARNING",
    lone: bool = True,
) -> list[str]:
    """The command line of a real worker of this app, run by this interpreter: what the tests and benchmarks that
    start one run (the Procfile's `worker` is the same command). `lone`: the worker talks to no other worker (no
    heartbeats, gossip or mingle, which only cost a lone worker time at its start)."""
    command = [sys.executable, "-m", "celery", "-A", "portal", "worker", "--loglevel", loglevel]
    if pool:
        command += ["--pool", pool]
    if concurrency:
        command += ["--concurrency", str(concurrency)]
    if queues:
        command += ["--queues", ",".join(queues)]
    if include:
        command += ["--include", ",".join(include)]
    if lone:
        command += ["--without-heartbeat", "--without-gossip", "--without-mingle"]
    return command
