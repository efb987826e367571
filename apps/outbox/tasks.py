"""The outbox's drain, run by the worker on beat's schedule: it sends what the broker did not take at commit time."""

from __future__ import annotations

from celery import shared_task

from apps.outbox import services


@shared_task(ignore_result=True)
def drain() -> int:
    return services.drain()
