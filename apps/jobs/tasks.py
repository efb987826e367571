"""Celery entry points of the orchestrator. Each takes ids and is safe to run twice."""

from __future__ import annotations

from celery import shared_task

from apps.jobs import orchestrator


@shared_task(ignore_result=True)
def advance_run(run_id: int, task_id: int | None = None, reported: dict | None = None) -> None:
    orchestrator.advance_run(run_id, task_id, reported)


@shared_task(ignore_result=True)
def dispatch_waiting() -> None:
    orchestrator.dispatch_waiting()


@shared_task(ignore_result=True)
def reconcile() -> None:
    orchestrator.reconcile()


@shared_task(ignore_result=True)
def compact_rollups() -> None:
    from apps.jobs.rollups import compact

    compact()


@shared_task(ignore_result=True)
def tick_schedules() -> None:
    from apps.jobs.schedules import tick

    tick()
