"""Celery entry points of continuous training: ids in, a service call, safe to run twice (a version is checked once
per monitor, a challenger judged once per policy, an alert event announced once)."""

from __future__ import annotations

import logging

from celery import shared_task

from apps.datasets.models import DatasetVersion
from apps.jobs.models import PipelineRun
from apps.monitoring.models import DriftReport
from apps.retraining import gate, services
from apps.retraining.models import DataCheck, DataMonitor, PromotionDecision, Retraining, RetrainPolicy

logger = logging.getLogger(__name__)


@shared_task(soft_time_limit=240, time_limit=300)
def check_version(version_id: int) -> list[int]:
    """A dataset version was committed: every enabled monitor of its dataset compares it with the previous one."""
    version = DatasetVersion.objects.select_related("dataset__project", "parent").filter(pk=version_id).first()
    if version is None:
        return []
    checks = []
    for monitor in DataMonitor.objects.filter(dataset=version.dataset, enabled=True).select_related("policy"):
        checks.append(services.check_version(monitor, version).pk)
    return checks


@shared_task
def check_due_monitors() -> list[int]:
    """Every minute (beat): monitors with an interval whose time came start their policy with the newest version."""
    started = []
    for pk in services.claim_due():
        monitor = DataMonitor.objects.select_related("policy").get(pk=pk)
        try:
            detail = f"{monitor.name}: every {monitor.interval_minutes} min"
            retraining = services.start_policy(monitor.policy, Retraining.Reason.INTERVAL, detail=detail)
        except Exception:  # one broken monitor must not starve the others
            logger.exception("data monitor %s failed", pk)
            continue
        started.append(retraining.pk)
    return started


@shared_task(soft_time_limit=60, time_limit=90)
def start_for_drift(policy_id: int, report_id: int) -> int | None:
    policy = RetrainPolicy.objects.select_related("pipeline", "dataset").filter(pk=policy_id).first()
    report = DriftReport.objects.select_related("monitor__service").filter(pk=report_id).first()
    if policy is None or report is None:
        return None
    detail = f"{report.monitor.service.name}: drift {report.score:.3f} ({report.message})"
    return services.start_policy(policy, Retraining.Reason.DRIFT, detail=detail).pk


@shared_task(soft_time_limit=60, time_limit=90)
def judge_run(run_id: int) -> int | None:
    run = PipelineRun.objects.filter(pk=run_id).first()
    decision = gate.judge_run(run) if run is not None else None
    return decision.pk if decision is not None else None


@shared_task(soft_time_limit=60, time_limit=90)
def announce(event: str, pk: int) -> None:
    """An alert event of the project (the kinds in apps/retraining/kinds.py listen)."""
    from apps.alerts.engine import handle_event

    model = DataCheck if event == "dataset_checked" else PromotionDecision
    related = ("monitor__project", "version__dataset") if model is DataCheck else ("project", "challenger")
    obj = model.objects.select_related(*related).filter(pk=pk).first()
    if obj is not None:
        handle_event(event, obj.project.pk, obj)
