"""Each rule kind fires once while its condition holds (deduplicated) and resolves when it clears."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.alerts import engine
from apps.alerts.models import AlertEvent, Delivery
from apps.jobs.models import PipelineRun, RunStatus, TaskRun, TaskStatus
from apps.monitoring.models import DriftMonitor, DriftReport
from apps.notebooks.models import Notebook
from apps.projects.models import Quota
from apps.serving.models import InferenceService, Revision, RevisionTraffic
from apps.serving.stats import BOUNDS_MS
from tests.access import make_run
from tests.alerts.factories import rule as make_rule

pytestmark = pytest.mark.django_db


def finished(project, owner, status, name="train", reason=""):
    run = make_run(project, owner)
    now = timezone.now()
    PipelineRun.objects.filter(pk=run.pk).update(
        pipeline_name=name, status=status, reason=reason, started_at=now - timedelta(seconds=42), finished_at=now
    )
    return PipelineRun.objects.select_related("project").get(pk=run.pk)


def deliveries(rule, kind):
    return Delivery.objects.filter(event__rule=rule, kind=kind).count()


def test_run_failed_fires_once_while_failing_and_resolves_on_success(world):
    p, alice = world.project_a, world.alice
    rule = make_rule(p, alice, "run_failed")
    assert engine.handle_event("run_finished", p.pk, finished(p, alice, RunStatus.FAILED, reason="a: exit 1")) == (1, 0)
    assert engine.handle_event("run_finished", p.pk, finished(p, alice, RunStatus.FAILED)) == (0, 0)
    event = AlertEvent.objects.get(rule=rule)
    assert (event.status, event.count, event.key) == ("firing", 2, "pipeline:train")
    assert "failed: a: exit 1" in event.message
    assert deliveries(rule, "firing") == 1
    assert engine.handle_event("run_finished", p.pk, finished(p, alice, RunStatus.SUCCEEDED)) == (0, 1)
    event.refresh_from_db()
    assert event.status == "resolved"
    assert event.resolved_at is not None
    assert "succeeded" in event.resolve_message
    assert deliveries(rule, "resolved") == 1
    # a later failure is a new alert
    assert engine.handle_event("run_finished", p.pk, finished(p, alice, RunStatus.FAILED)) == (1, 0)
    assert AlertEvent.objects.filter(rule=rule).count() == 2


def test_run_failed_follows_only_its_pipeline(world):
    p, alice = world.project_a, world.alice
    from tests.factories import pipeline

    pipeline(p, alice, [{"name": "a", "args": {"code": "pass"}}], name="nightly")
    rule = make_rule(p, alice, "run_failed", {"pipeline": "nightly"})
    engine.handle_event("run_finished", p.pk, finished(p, alice, RunStatus.FAILED, name="train"))
    assert not AlertEvent.objects.filter(rule=rule).exists()
    engine.handle_event("run_finished", p.pk, finished(p, alice, RunStatus.FAILED, name="nightly"))
    assert AlertEvent.objects.get(rule=rule).key == "pipeline:nightly"


def test_run_succeeded_announces_each_run_once(world):
    p, alice = world.project_a, world.alice
    rule = make_rule(p, alice, "run_succeeded")
    run = finished(p, alice, RunStatus.SUCCEEDED)
    assert engine.handle_event("run_finished", p.pk, run) == (1, 0)
    assert engine.handle_event("run_finished", p.pk, run) == (0, 0)  # the same event twice: sent once
    event = AlertEvent.objects.get(rule=rule)
    assert event.status == "resolved"
    assert "succeeded in 42 s" in event.message
    assert deliveries(rule, "firing") == 1
    assert deliveries(rule, "resolved") == 0
    engine.handle_event("run_finished", p.pk, finished(p, alice, RunStatus.FAILED))
    assert AlertEvent.objects.filter(rule=rule).count() == 1


def test_run_duration_fires_while_the_run_goes_on_and_resolves_when_it_ends(world):
    p, alice = world.project_a, world.alice
    rule = make_rule(p, alice, "run_duration", {"minutes": 10})
    run = make_run(p, alice)
    now = timezone.now()
    PipelineRun.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING, started_at=now - timedelta(minutes=5))
    assert engine.evaluate_rule(rule, now) == (0, 0)
    assert engine.evaluate_rule(rule, now + timedelta(minutes=6)) == (1, 0)
    assert engine.evaluate_rule(rule, now + timedelta(minutes=7)) == (0, 0)
    event = AlertEvent.objects.get(rule=rule)
    assert event.count == 2
    assert event.value == 12
    assert "going for 11 minutes (limit 10)" in event.message
    PipelineRun.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED, finished_at=now)
    assert engine.evaluate_rule(rule, now + timedelta(minutes=8)) == (0, 1)
    assert AlertEvent.objects.get(rule=rule).status == "resolved"
    assert deliveries(rule, "firing") == 1
    assert deliveries(rule, "resolved") == 1


def test_a_running_tasks_resource_warning_fires_per_warning_and_resolves_when_the_task_ends(world):
    p, alice = world.project_a, world.alice
    rule = make_rule(p, alice, "task_resource_warning", {})
    run = make_run(p, alice)
    task = TaskRun.objects.create(run=run, node="train", status=TaskStatus.RUNNING)
    now = timezone.now()
    assert engine.evaluate_rule(rule, now) == (0, 0)  # running, no warning
    low = {"kind": "low_gpu", "replica": "worker-0", "reason": "GPU utilisation of replica worker-0 stayed under 20% "
           "for 5 minutes", "at": now.isoformat()}  # fmt: skip
    near = {"kind": "memory_near_limit", "replica": "master-0", "reason": "Replica master-0 used 3.7 GiB of its 4 GiB "
            "memory limit (over 90%)", "at": now.isoformat()}  # fmt: skip
    TaskRun.objects.filter(pk=task.pk).update(resource_warnings=[low, near])
    assert engine.evaluate_rule(rule, now) == (2, 0)
    assert engine.evaluate_rule(rule, now + timedelta(minutes=1)) == (0, 0)  # still firing: not sent again
    messages = sorted(AlertEvent.objects.filter(rule=rule).values_list("message", flat=True))
    assert (
        messages[0]
        == f"Run pipe #{run.number}, task train: GPU utilisation of replica worker-0 stayed under 20% for 5 minutes"
    )
    assert "used 3.7 GiB of its 4 GiB memory limit" in messages[1]
    TaskRun.objects.filter(pk=task.pk).update(status=TaskStatus.SUCCEEDED)
    assert engine.evaluate_rule(rule, now + timedelta(minutes=2)) == (0, 2)
    assert deliveries(rule, "firing") == 2
    assert deliveries(rule, "resolved") == 2


def traffic(project, owner, requests, errors, slow_ms=None):
    service = InferenceService.objects.filter(project=project, name="iris").first() or InferenceService.objects.create(
        project=project, name="iris", created_by=owner
    )
    revision = Revision.objects.get_or_create(service=service, number=1)[0]
    buckets = [0] * (len(BOUNDS_MS) + 1)
    bucket = BOUNDS_MS.index(slow_ms) if slow_ms else 0
    buckets[bucket] = requests
    minute = timezone.now().replace(second=0, microsecond=0)
    RevisionTraffic.objects.update_or_create(
        revision=revision, minute=minute, source="test",
        defaults={"requests": requests, "errors": errors, "latency_buckets": buckets},
    )  # fmt: skip
    return service


def test_service_error_rate_fires_above_the_threshold_and_resolves_below(world):
    p, alice = world.project_a, world.alice
    traffic(p, alice, 100, 1)
    rule = make_rule(p, alice, "service_error_rate", {"threshold": 5, "minutes": 5})
    assert engine.evaluate_rule(rule) == (0, 0)
    service = traffic(p, alice, 100, 20)
    assert engine.evaluate_rule(rule) == (1, 0)
    assert engine.evaluate_rule(rule) == (0, 0)
    event = AlertEvent.objects.get(rule=rule)
    assert event.key == f"service:{service.pk}"
    assert event.value == 20.0
    assert "20 of 100 requests" in event.message
    traffic(p, alice, 100, 2)
    assert engine.evaluate_rule(rule) == (0, 1)


def test_service_error_rate_ignores_a_window_with_too_few_requests(world):
    p, alice = world.project_a, world.alice
    traffic(p, alice, 5, 5)
    rule = make_rule(p, alice, "service_error_rate", {"threshold": 5, "min_requests": 10})
    assert engine.evaluate_rule(rule) == (0, 0)


def test_service_latency_fires_above_the_p99_threshold_and_resolves(world):
    p, alice = world.project_a, world.alice
    traffic(p, alice, 50, 0, slow_ms=500)
    rule = make_rule(p, alice, "service_latency", {"threshold": 250, "minutes": 3})
    assert engine.evaluate_rule(rule) == (1, 0)
    event = AlertEvent.objects.get(rule=rule)
    assert 300 < event.value <= 500
    assert "p99 latency" in event.message
    traffic(p, alice, 50, 0, slow_ms=20)
    assert engine.evaluate_rule(rule) == (0, 1)


def test_drift_score_fires_on_the_newest_report_above_the_threshold_and_resolves(world):
    p, alice = world.project_a, world.alice
    service = InferenceService.objects.create(project=p, name="iris", created_by=alice)
    monitor = DriftMonitor.objects.create(project=p, service=service, created_by=alice, threshold=0.2)
    features = {"petal_length": {"psi": 1.4, "score": 1.4}, "sepal_width": {"psi": 0.01, "score": 0.01}}
    DriftReport.objects.create(monitor=monitor, status="ok", score=0.05)
    rule = make_rule(p, alice, "drift_score", {})  # the monitor's own threshold
    assert engine.evaluate_rule(rule) == (0, 0)

    DriftReport.objects.create(monitor=monitor, status="drifted", score=1.4, features=features)
    DriftReport.objects.create(monitor=monitor, status="skipped", score=None)  # too few rows: says nothing
    assert engine.evaluate_rule(rule) == (1, 0)
    assert engine.evaluate_rule(rule) == (0, 0)  # still firing: one alert
    event = AlertEvent.objects.get(rule=rule)
    assert (event.key, event.value) == (f"monitor:{monitor.pk}", 1.4)
    assert "drift score 1.400 is above 0.2 (most shifted: petal_length, sepal_width)" in event.message

    strict = make_rule(p, alice, "drift_score", {"threshold": 2, "service": "iris"})
    assert engine.evaluate_rule(strict) == (0, 0)
    DriftReport.objects.create(monitor=monitor, status="ok", score=0.1)
    assert engine.evaluate_rule(rule) == (0, 1)


def test_quota_usage_fires_per_resource_and_resolves(world):
    p, alice = world.project_a, world.alice
    Quota.objects.filter(project=p).update(cpu_cores=Decimal("4"))
    rule = make_rule(p, alice, "quota_usage", {"threshold": 75})
    nb = Notebook.objects.create(project=p, owner=alice, name="big", cpu=Decimal("3"), status=Notebook.Status.RUNNING)
    assert engine.evaluate_rule(rule) == (1, 0)
    assert engine.evaluate_rule(rule) == (0, 0)
    event = AlertEvent.objects.get(rule=rule)
    assert event.key == "quota:cpu"
    assert event.value == 75.0
    assert "(3/4)" in event.message
    Notebook.objects.filter(pk=nb.pk).update(status=Notebook.Status.STOPPED)
    assert engine.evaluate_rule(rule) == (0, 1)


def test_notebook_culled_announces_each_stop_once(world):
    p, alice = world.project_a, world.alice
    rule = make_rule(p, alice, "notebook_culled")
    nb = Notebook.objects.create(
        project=p, owner=alice, name="lab", status=Notebook.Status.STOPPED, stopped_at=timezone.now(),
        reason="stopped after 60 minutes idle",
    )  # fmt: skip
    assert engine.handle_event("notebook_culled", p.pk, nb) == (1, 0)
    assert engine.handle_event("notebook_culled", p.pk, nb) == (0, 0)
    event = AlertEvent.objects.get(rule=rule)
    assert event.status == "resolved"
    assert "stopped after 60 minutes idle" in event.message
    assert deliveries(rule, "firing") == 1


def test_a_disabled_rule_neither_fires_nor_hears_events(world):
    p, alice = world.project_a, world.alice
    rule = make_rule(p, alice, "run_failed", enabled=False)
    engine.handle_event("run_finished", p.pk, finished(p, alice, RunStatus.FAILED))
    assert not AlertEvent.objects.filter(rule=rule).exists()


def test_rules_of_another_project_do_not_hear_its_events(world):
    rule = make_rule(world.project_b, world.charlie, "run_failed")
    engine.handle_event("run_finished", world.project_a.pk, finished(world.project_a, world.alice, RunStatus.FAILED))
    assert not AlertEvent.objects.filter(rule=rule).exists()
