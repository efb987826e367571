"""What an attempt preempted for a project under its quota (requeued as a new attempt: apps/jobs/orchestrator.py
`_requeue`) does not count as: a failure that uses up one of the node's `retries` (they count failed attempts, not
attempts), nor the node's end in its run's progress."""

from __future__ import annotations

from datetime import UTC, datetime

from apps.jobs.models import PipelineRun, TaskRun, TaskStatus
from apps.jobs.orchestrator import PREEMPTED, _apply_phase
from apps.runtime.workload import Phase, Status
from tests.access import make_run

START = datetime(2026, 1, 5, 10, 0, tzinfo=UTC)
NODE = {"name": "a", "retries": 1, "retry_backoff": 10}


def attempt(run, number: int, status: str, **fields) -> TaskRun:
    return TaskRun.objects.create(run=run, node="a", attempt=number, status=status, **fields)


def fail(task: TaskRun) -> TaskRun | None:
    return _apply_phase(task, Status(Phase.FAILED, exit_code=1, reason="exited with code 1"), NODE, START, [])


def test_a_failure_after_a_preemption_is_retried(world):
    run = make_run(world.project_a, world.alice)
    attempt(run, 1, TaskStatus.CANCELLED, preempted_at=START, reason=PREEMPTED, finished_at=START)
    second = attempt(run, 2, TaskStatus.RUNNING)

    retry = fail(second)

    assert retry is not None
    assert (retry.attempt, retry.status) == (3, TaskStatus.WAITING)
    assert retry.waiting_reason == "retry 1/1 after 10 s backoff (exited with code 1)"


def test_the_retries_still_run_out_after_as_many_failures_preemptions_aside(world):
    run = make_run(world.project_a, world.alice)
    attempt(run, 1, TaskStatus.FAILED, finished_at=START)
    attempt(run, 2, TaskStatus.CANCELLED, preempted_at=START, reason=PREEMPTED, finished_at=START)
    third = attempt(run, 3, TaskStatus.RUNNING)

    assert fail(third) is None
    assert TaskRun.objects.filter(run=run).count() == 3


def test_the_backoff_doubles_with_each_failure_not_with_each_attempt(world):
    run = make_run(world.project_a, world.alice)
    attempt(run, 1, TaskStatus.FAILED, finished_at=START)
    attempt(run, 2, TaskStatus.CANCELLED, preempted_at=START, reason=PREEMPTED, finished_at=START)
    third = attempt(run, 3, TaskStatus.RUNNING)

    retry = _apply_phase(
        third, Status(Phase.FAILED, exit_code=1, reason="exited with code 1"), {**NODE, "retries": 3}, START, []
    )

    assert retry is not None
    assert retry.waiting_reason == "retry 2/3 after 20 s backoff (exited with code 1)"


def test_a_preempted_node_is_not_done_in_its_runs_progress_while_its_requeued_attempt_waits(world):
    run = make_run(world.project_a, world.alice)
    attempt(run, 1, TaskStatus.CANCELLED, preempted_at=START, reason=PREEMPTED, finished_at=START)
    requeued = attempt(run, 2, TaskStatus.WAITING)

    assert run.progress() == (0, 1)
    assert PipelineRun.objects.with_progress().get(pk=run.pk).progress() == (0, 1)

    requeued.status = TaskStatus.SUCCEEDED
    requeued.save(update_fields=["status"])
    assert run.progress() == (1, 1)
    assert PipelineRun.objects.with_progress().get(pk=run.pk).progress() == (1, 1)
