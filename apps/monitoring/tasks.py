"""Celery entry points: the beat sweep that runs due drift monitors, and one monitor's run."""

from __future__ import annotations

import logging

from celery import shared_task

from apps.monitoring import services
from apps.monitoring.models import DriftMonitor

logger = logging.getLogger(__name__)


@shared_task
def check_monitors() -> list[int]:
    """Every minute (beat): claim the due monitors and run them here, one after the other (a check reads at most
    100,000 reference rows and 20,000 logged requests: seconds, not minutes). Returns the reports' ids."""
    reports = []
    for pk in services.claim_due():
        try:
            report = run_monitor(pk)
        except Exception:  # one broken monitor must not starve the others; it is claimed again next interval
            logger.exception("drift monitor %s failed", pk)
            continue
        if report is not None:
            reports.append(report)
    return reports


@shared_task
def run_monitor(pk: int) -> int | None:
    """Run one monitor now (safe twice: a second run writes a second report of the same window)."""
    related = ("service__current_revision__model_version__run", "project", "reference_version__dataset")
    monitor = DriftMonitor.objects.select_related(*related).filter(pk=pk).first()
    if monitor is None:
        return None
    return services.run_monitor(monitor).pk
