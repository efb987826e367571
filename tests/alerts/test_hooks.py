"""How alerts hear of the apps below: a run's end (jobs' on_run_finished) and a culled notebook (the culler's
on_culled) queue a task through the outbox, only when a rule of the project listens."""

from __future__ import annotations

import pytest
from django.utils import timezone

from apps.alerts import services, tasks
from apps.alerts.models import AlertEvent
from apps.jobs import orchestrator
from apps.jobs.models import PipelineRun, RunStatus
from apps.notebooks import culler
from apps.notebooks.models import Notebook
from apps.outbox.models import PendingTask
from tests.access import make_run
from tests.alerts.factories import rule as make_rule

pytestmark = pytest.mark.django_db


def test_the_hooks_are_registered():
    assert services.on_run_finished in orchestrator._run_finished
    assert services.on_notebook_culled in culler._culled


def test_a_finished_run_queues_the_rules_pass_only_when_a_rule_listens(world):
    run = make_run(world.project_a, world.alice)
    services.on_run_finished(run)
    assert not PendingTask.objects.exists()
    make_rule(world.project_a, world.alice, "run_failed")
    services.on_run_finished(run)
    assert list(PendingTask.objects.values_list("name", "args")) == [("apps.alerts.tasks.run_finished", [run.pk])]


def test_the_run_finished_task_fires_the_rule(world):
    rule = make_rule(world.project_a, world.alice, "run_failed")
    run = make_run(world.project_a, world.alice)
    PipelineRun.objects.filter(pk=run.pk).update(status=RunStatus.FAILED, reason="a: exit 3")
    tasks.run_finished(run.pk)
    assert "a: exit 3" in AlertEvent.objects.get(rule=rule).message


def test_a_culled_notebook_fires_the_rule(world):
    rule = make_rule(world.project_a, world.alice, "notebook_culled")
    nb = Notebook.objects.create(
        project=world.project_a, owner=world.alice, name="lab", status=Notebook.Status.STOPPED,
        stopped_at=timezone.now(), reason="stopped after 61 minutes idle",
    )  # fmt: skip
    culler._notify_culled(nb)
    assert PendingTask.objects.filter(name="apps.alerts.tasks.notebook_culled", args=[nb.pk]).exists()
    tasks.notebook_culled(nb.pk)
    assert AlertEvent.objects.get(rule=rule).key.startswith(f"notebook:{nb.pk}:")


def test_the_beat_evaluates_threshold_rules_only(world):
    make_rule(world.project_a, world.alice, "run_failed")
    make_rule(world.project_a, world.alice, "quota_usage", {"threshold": 90})
    assert tasks.evaluate_rules() == 1
