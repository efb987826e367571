"""The other two ways a policy starts: a drift monitor of a service reporting drift (the monitoring app's
`drift_detected` signal), and a data monitor's interval elapsing (beat's sweep, each due monitor claimed once)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.monitoring.models import DriftMonitor, DriftReport
from apps.monitoring.signals import drift_detected
from apps.outbox.models import PendingTask
from apps.retraining.models import DataMonitor, Retraining
from apps.retraining.services import claim_due, create_monitor
from apps.retraining.tasks import check_due_monitors, start_for_drift
from tests.factories import dataset, dataset_version
from tests.retraining.factories import policy
from tests.serving.factories import service

pytestmark = pytest.mark.django_db


def test_a_drifted_service_starts_the_policies_that_name_its_monitor(world):
    project, alice = world.project_a, world.alice
    monitor = DriftMonitor.objects.create(project=project, service=service(project, alice), created_by=alice)
    newest = dataset_version(dataset(project, alice, name="iris"))
    rule = policy(project, alice, drift_monitor=monitor)
    policy(project, alice, name="unrelated")  # names no monitor
    report = DriftReport.objects.create(monitor=monitor, status=DriftReport.Status.DRIFTED, score=0.7, message="x")

    drift_detected.send(sender=DriftMonitor, monitor=monitor, report=report, score=report.score)

    queued = PendingTask.objects.get(name="apps.retraining.tasks.start_for_drift")
    assert queued.args == [rule.pk, report.pk]
    retraining = Retraining.objects.get(pk=start_for_drift(*queued.args))
    assert (retraining.policy, retraining.reason, retraining.dataset_version) == (rule, "drift", newest)
    assert retraining.run is not None
    assert "drift 0.700" in retraining.detail


def test_an_interval_starts_the_policy_once_per_interval(world):
    project, alice = world.project_a, world.alice
    ds = dataset(project, alice, name="iris")
    dataset_version(ds)
    rule = policy(project, alice, dataset=ds, cooldown_minutes=0)
    monitor = create_monitor(project, alice, name="hourly", dataset=ds, policy=rule, interval_minutes=60)
    never = create_monitor(project, alice, name="on-change", dataset=ds, policy=rule)
    assert never.next_run_at is None
    assert claim_due() == []  # the first interval has not passed

    DataMonitor.objects.filter(pk=monitor.pk).update(next_run_at=timezone.now() - timedelta(seconds=1))
    started = check_due_monitors()

    assert [Retraining.objects.get(pk=pk).reason for pk in started] == ["interval"]
    assert check_due_monitors() == []  # claimed: the next run is an hour away
    assert DataMonitor.objects.get(pk=monitor.pk).next_run_at > timezone.now() + timedelta(minutes=59)
