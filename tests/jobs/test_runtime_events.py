"""A runtime event advances its run from what the event reports (no second look at the runtime), and
only for the attempt it is about; without a report the runtime is asked."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from apps.jobs import orchestrator
from apps.jobs.models import TaskStatus
from apps.jobs.services import start_run
from apps.runtime.workload import Phase, Status
from tests.factories import ProjectFactory, UserFactory, pipeline


@pytest.fixture
def queued(db):
    """A one-node run whose task was handed to a runtime that has no record of it (so polling says lost)."""
    owner = UserFactory(username="alice")
    project = ProjectFactory(owner=owner, slug="project-a")
    run = start_run(pipeline(project, owner, [{"name": "x", "args": {"code": "pass"}}]), owner)
    orchestrator.advance_run(run.pk)  # creates the task (no agent: it waits)
    task = run.tasks.get()
    task.status, task.runtime, task.handle = TaskStatus.QUEUED, "local", "task-unknown"
    task.save()
    return run, task


def test_an_event_with_the_runtimes_record_is_applied_without_polling(queued):
    run, task = queued
    report = asdict(Status(Phase.SUCCEEDED, exit_code=0, usage={"wall_seconds": 1.5}))
    orchestrator.advance_run(run.pk, task.pk, report)
    task.refresh_from_db()
    assert (task.status, task.exit_code, task.usage) == ("succeeded", 0, {"wall_seconds": 1.5})
    run.refresh_from_db()
    assert run.status == "succeeded"


def test_without_a_report_the_runtime_is_asked(queued):
    run, task = queued
    orchestrator.advance_run(run.pk, task.pk)
    task.refresh_from_db()
    assert task.status == "failed"
    assert task.reason == "agent lost: the process supervising it died"
