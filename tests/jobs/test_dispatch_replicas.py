"""A distributed node holds its resources once per replica: 2 replicas × 4 GPUs is 8 GPUs, at save (the quota
check), in the queue (quota and capacity, and the waiting reason) and in the local runtime's capacity. An agent
that only heartbeats takes the work (nothing runs it), so what the queue decided stays put."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.utils.timezone import now

from apps.jobs import orchestrator
from apps.jobs.models import PipelineRun, TaskRun
from apps.jobs.services import normalize_spec, start_run
from apps.projects.usage import in_use
from apps.runtime.base import get_runtime
from apps.runtime.models import LocalWorkload
from tests.factories import pipeline, python_template
from tests.notebooks.factories import heartbeat_agent

# All databases: a queued node's event is published to the embedded channel layer's table.
pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

NODE = [{"name": "train", "template": "ddp", "args": {"code": "pass"}, "resources": {"gpu": 4}}]


@pytest.fixture
def ddp(transactional_db):
    """A PyTorch template of one master and one worker: a node of it at 4 GPUs holds 8."""
    python_template()
    return python_template(slug="ddp", kind="distributed", framework="pytorch", replicas={"master": 1, "worker": 1})


def gpu_quota(project, gpus: int) -> None:
    project.quota.gpus = gpus
    project.quota.save()


def started(pipe, owner) -> PipelineRun:
    run = start_run(pipe, owner)
    orchestrator.advance_run(run.pk)
    return run


def task_of(run: PipelineRun) -> TaskRun:
    return TaskRun.objects.get(run=run, node="train")


def test_a_node_whose_replicas_ask_past_the_quota_is_refused_at_save_naming_the_figures(world, ddp):
    heartbeat_agent(cpu=32, gpu=16)
    gpu_quota(world.project_a, 6)
    with pytest.raises(ValidationError) as caught:
        normalize_spec(world.project_a, {"nodes": NODE})
    assert caught.value.message_dict == {
        "nodes.train.resources.gpu": [
            "asks for 8 GPUs (2 replicas of 4 GPUs); the limit is 6 (the project's quota)",
        ]
    }


def test_a_node_whose_replicas_fit_the_quota_runs_and_holds_all_of_them(world, ddp):
    agent = heartbeat_agent(cpu=32, gpu=16)
    gpu_quota(world.project_a, 8)
    run = started(pipeline(world.project_a, world.alice, NODE), world.alice)
    task = task_of(run)
    assert (task.status, task.waiting_reason, task.replicas) == ("queued", "", 2)
    # The local runtime holds the workload's 2 × 4 GPUs, and the project's quota counts the same.
    capacity = get_runtime("local").capacity()
    assert (capacity.total.gpu, capacity.free.gpu) == (16, 8)
    assert in_use(world.project_a).gpu == 8
    assert agent.capacity["gpu"] == 16


def test_a_node_over_a_lowered_quota_waits_saying_what_its_replicas_need(world, ddp):
    heartbeat_agent(cpu=32, gpu=16)
    gpu_quota(world.project_a, 8)
    run = start_run(pipeline(world.project_a, world.alice, NODE), world.alice)
    gpu_quota(world.project_a, 6)  # lowered after the run started, before its node was dispatched
    orchestrator.advance_run(run.pk)
    task = task_of(run)
    assert (task.status, task.waiting_reason) == ("waiting", "waiting for 8 GPUs — quota 0/6 in use")


def test_a_second_job_waits_while_the_first_holds_the_quota(world, ddp):
    heartbeat_agent(cpu=32, gpu=16)
    gpu_quota(world.project_a, 8)
    pipe = pipeline(world.project_a, world.alice, NODE)
    first, second = started(pipe, world.alice), started(pipe, world.alice)
    assert task_of(first).status == "queued"
    assert (task_of(second).status, task_of(second).waiting_reason) == (
        "waiting",
        "waiting for 8 GPUs — quota 8/8 in use",
    )


def test_a_second_job_waits_for_the_machine_the_first_fills(world, ddp):
    heartbeat_agent(cpu=32, gpu=12)
    pipe = pipeline(world.project_a, world.alice, NODE)
    first, second = started(pipe, world.alice), started(pipe, world.alice)
    assert task_of(first).status == "queued"
    assert (task_of(second).status, task_of(second).waiting_reason) == (
        "waiting",
        "waiting for 8 GPUs — 4 of 12 free on this machine",
    )


def test_a_retry_holds_as_many_replicas_as_the_attempt_it_retries(world, ddp):
    heartbeat_agent(cpu=32, gpu=16)
    pipe = pipeline(world.project_a, world.alice, [{**NODE[0], "retries": 1, "retry_backoff": 0}])
    run = started(pipe, world.alice)
    handle = task_of(run).handle
    LocalWorkload.objects.filter(uid=handle).update(state="failed", exit_code=1, reason="boom", finished_at=now())
    orchestrator.advance_run(run.pk)
    retry = TaskRun.objects.get(run=run, node="train", attempt=2)
    assert retry.replicas == 2


def test_a_task_and_its_retry_record_the_timeout_their_node_declares(world, ddp):
    # The backfill queue groups the tasks it has not read by it (apps/jobs/queue_scan.py `BackfillQueue`).
    heartbeat_agent(cpu=32, gpu=16)
    pipe = pipeline(world.project_a, world.alice, [{**NODE[0], "retries": 1, "retry_backoff": 0, "timeout": 600}])
    run = started(pipe, world.alice)
    first = task_of(run)
    assert first.timeout == 600
    LocalWorkload.objects.filter(uid=first.handle).update(state="failed", exit_code=1, reason="boom", finished_at=now())
    orchestrator.advance_run(run.pk)
    assert TaskRun.objects.get(run=run, node="train", attempt=2).timeout == 600


def test_a_spark_node_counts_once_on_this_machine_where_it_runs_as_one_process(world, ddp):
    heartbeat_agent(cpu=32, gpu=16)
    gpu_quota(world.project_a, 6)
    python_template(slug="spark", kind="distributed", framework="spark", replicas={"driver": 1, "executor": 1})
    spec = normalize_spec(world.project_a, {"nodes": [{**NODE[0], "template": "spark"}]})
    assert spec["nodes"][0]["resources"]["gpu"] == 4
