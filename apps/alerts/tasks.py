"""Celery entry points of alerts: ids in, safe to run twice (deliveries are claimed, events deduplicated)."""

from __future__ import annotations

from celery import shared_task

from apps.alerts import engine, senders
from apps.jobs.models import PipelineRun
from apps.notebooks.models import Notebook

RETRY_DELAYS = (10, 60, 300)  # seconds before the 2nd, 3rd and 4th try


@shared_task(bind=True, max_retries=senders.MAX_TRIES - 1, soft_time_limit=45, time_limit=60, acks_late=True)
def deliver(self, delivery_id: int) -> str:
    """Send one message; a failure is recorded on the row (its attempts count the tries) and tried again later, the
    last one stays failed."""
    outcome = senders.attempt(delivery_id)
    if outcome == "retry":
        delay = RETRY_DELAYS[min(self.request.retries or 0, len(RETRY_DELAYS) - 1)]
        raise self.retry(countdown=delay)
    return outcome


@shared_task(soft_time_limit=240, time_limit=300)
def evaluate_rules() -> int:
    """The beat's pass over the threshold rules (error rate, latency, duration, quota)."""
    return engine.evaluate_all()


@shared_task(soft_time_limit=60, time_limit=90)
def run_finished(run_id: int) -> None:
    run = PipelineRun.objects.select_related("project").filter(pk=run_id).first()
    if run is not None:
        engine.handle_event("run_finished", run.project_id, run)


@shared_task(soft_time_limit=60, time_limit=90)
def notebook_culled(notebook_id: int) -> None:
    nb = Notebook.objects.select_related("project", "owner").filter(pk=notebook_id).first()
    if nb is not None:
        engine.handle_event("notebook_culled", nb.project_id, nb)
