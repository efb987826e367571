"""The `kubernetes` queue's tasks, their bodies run here: routed to their queue, acknowledged late, retried with
backoff (at least Retry-After) on what may pass, never on a refusal, idempotent, a delete that finds nothing fine."""

from __future__ import annotations

import pytest

from apps.runtime import tasks
from apps.runtime.kubernetes.retry import task_countdown
from apps.runtime.models import KubeWorkload
from apps.runtime.workload import Phase
from portal.celery import app
from tests.runtime.kubernetes.conftest import fresh_runtime, mine
from tests.runtime.kubernetes.samples import sample_job

JOBS = ("batch", "jobs")
KUBE_TASKS = ["kube_apply", "kube_delete", "kube_refresh_inventory", "kube_refresh_inventories", "kube_repair"]


@pytest.mark.parametrize("name", KUBE_TASKS)
def test_every_kubernetes_task_goes_to_its_own_queue_and_is_acknowledged_late(name):
    task = getattr(tasks, name)
    assert app.amqp.router.route({}, task.name)["queue"].name == "kubernetes"
    assert task.acks_late is True
    assert task.reject_on_worker_lost is True
    assert app.amqp.router.route({}, "apps.jobs.tasks.reconcile")["queue"].name == "celery"


def test_the_tasks_backoff_doubles_up_to_a_cap_and_never_undercuts_retry_after(settings):
    settings.PORTAL_KUBE_TASK_RETRY_BASE = 2
    for retries, full in ((0, 2), (1, 4), (3, 16), (6, 120), (20, 120)):
        assert full / 2 <= task_countdown(retries) <= full  # half fixed, half random
    assert task_countdown(0, retry_after=45) == 45
    assert task_countdown(0, retry_after=3600) == 600  # an absurd Retry-After is cut


def test_an_apply_throttled_with_429_is_retried_later_as_the_server_asks_then_left_to_the_repair(
    fake, cluster, settings, monkeypatch
):
    settings.PORTAL_KUBE_RETRY_ATTEMPTS = 1  # no retry inside the call: each task attempt is one request
    throttled = fake.faults.fail("POST", r"/jobs$", 429, times=100, retry_after=7, message="slow down")
    countdowns: list[float] = []

    def recorded(retries: int, retry_after: float | None = None) -> float:
        countdowns.append(task_countdown(retries, retry_after))
        return countdowns[-1]

    monkeypatch.setattr(tasks, "task_countdown", recorded)
    fresh_runtime().submit(mine(sample_job(), "task-1"))
    result = tasks.kube_apply.apply(args=["task-1"])  # eager: each retry runs at once, its countdown recorded
    assert result.failed()
    assert throttled.hits == 1 + tasks.MAX_RETRIES
    assert len(countdowns) == throttled.hits  # one per failed attempt (the last attempt's is not used: no retry left)
    assert min(countdowns) >= 7
    row = KubeWorkload.objects.get(uid="task-1")
    assert (row.state, row.created) == ("pending", False)  # the repair sweep queues it again later
    assert row.reason.startswith("waiting for cluster fake:")
    assert "429" in row.reason
    assert fake.objects(*JOBS, "team-a") == []


def test_an_apply_the_api_server_rejects_as_invalid_fails_at_once_with_its_reason(fake, cluster, listener):
    refusal = fake.faults.fail("POST", r"/jobs$", 422, times=100, message='Job.batch "x" is invalid: spec.template')
    fresh_runtime().submit(mine(sample_job(), "task-2"))
    result = tasks.kube_apply.apply(args=["task-2"])
    assert result.get() == "failed"
    assert refusal.hits == 1  # not retried
    row = KubeWorkload.objects.get(uid="task-2")
    assert row.state == "failed"
    assert 'Job.batch "x" is invalid' in row.reason
    assert listener.phases("task-2") == [Phase.FAILED]


def test_applying_twice_creates_once_and_an_ended_or_cancelled_row_is_left_alone(fake, cluster, listener):
    runtime = fresh_runtime()
    runtime.submit_many([mine(sample_job(), "task-3"), mine(sample_job(), "task-4")])
    assert tasks.kube_apply("task-3") == "created"
    assert tasks.kube_apply("task-3") == "nothing to do"  # a message delivered again
    runtime.cancel("task-4")  # cancelled before anything was applied: ended at once
    assert tasks.kube_apply("task-4") == "nothing to do"
    assert tasks.kube_apply("no-such-uid") == "nothing to do"
    assert [j["metadata"]["labels"]["portal.io/workload"] for j in fake.objects(*JOBS, "team-a")] == ["task-3"]
    assert len(fake.requests_to("POST", "/jobs")) == 1


def test_a_delete_of_objects_already_gone_succeeds_and_empties_applied(fake, cluster, listener):
    runtime = fresh_runtime()
    runtime.submit(mine(sample_job(), "task-5"))
    assert tasks.kube_apply("task-5") == "created"
    (job,) = fake.objects(*JOBS, "team-a")
    fake.store.delete(JOBS, "team-a", job["metadata"]["name"], "Foreground")  # someone was quicker
    runtime.cancel("task-5")
    assert tasks.kube_delete("task-5") == "deleted"
    assert tasks.kube_delete("task-5") == "nothing to do"
    row = KubeWorkload.objects.get(uid="task-5")
    assert row.applied == []
    assert (row.state, row.cancel_requested) == ("pending", True)  # the leader records the end (after the logs)
