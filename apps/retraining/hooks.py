"""What continuous training hears from the apps below it (connected in `RetrainingConfig.ready()`): a new dataset
version, a drifted service, a run that ended. Each only queues a task, after the commit (through the outbox)."""

from __future__ import annotations

from typing import Any

from apps.outbox.services import enqueue


def version_saved(sender: type, instance: Any, created: bool = False, raw: bool = False, **kwargs: Any) -> None:
    from apps.retraining.models import DataMonitor
    from apps.retraining.tasks import check_version

    if created and not raw and DataMonitor.objects.filter(dataset_id=instance.dataset_id, enabled=True).exists():
        enqueue(check_version, instance.pk)


def drift_reported(sender: type, monitor: Any, report: Any, **kwargs: Any) -> None:
    from apps.retraining.models import RetrainPolicy
    from apps.retraining.tasks import start_for_drift

    for pk in RetrainPolicy.objects.filter(drift_monitor=monitor, enabled=True).values_list("pk", flat=True):
        enqueue(start_for_drift, pk, report.pk)


def run_finished(run: Any) -> None:
    from apps.retraining.models import Retraining
    from apps.retraining.tasks import judge_run

    if Retraining.objects.filter(run_id=run.pk).exists():
        enqueue(judge_run, run.pk)
