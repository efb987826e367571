"""Tokens injected into task attempts die with the attempt, also when the advance that saw the end crashed
before revoking them (the periodic reconcile sweeps them)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from apps.accounts.services import new_task_token
from apps.jobs import orchestrator
from apps.jobs.models import PipelineRun, TaskRun, TaskStatus
from tests.factories import ProjectFactory, UserFactory


@pytest.fixture
def run(db):
    owner = UserFactory(username="alice")
    project = ProjectFactory(owner=owner, slug="project-a")
    return PipelineRun.objects.create(project=project, pipeline_name="p", number=1, status="succeeded")


def task_with_token(run: PipelineRun, node: str, status: str) -> TaskRun:
    token, _raw = new_task_token(run.project.created_by, name=node, project=run.project, days=1)
    token.save()
    return TaskRun.objects.create(run=run, node=node, status=status, api_token=token)


def test_reconcile_revokes_tokens_of_ended_attempts_only(run):
    ended = task_with_token(run, "ended", TaskStatus.SUCCEEDED)
    failed = task_with_token(run, "failed", TaskStatus.FAILED)
    running = task_with_token(run, "running", TaskStatus.RUNNING)
    queued = task_with_token(run, "queued", TaskStatus.QUEUED)
    before = timezone.now()

    orchestrator.reconcile()

    for task in (ended, failed):
        task.api_token.refresh_from_db()
        assert task.api_token.revoked_at >= before
    for task in (running, queued):
        task.api_token.refresh_from_db()
        assert task.api_token.revoked_at is None
