"""The queue and a project's quota of concurrent runs and of concurrent tasks: each limit means what it says and
a waiting node names the one it waits for. An agent that only heartbeats takes the work (nothing runs it), so
what the queue decided stays put."""

from __future__ import annotations

import pytest

from apps.jobs import orchestrator
from apps.jobs.models import PipelineRun, TaskRun
from apps.jobs.services import start_run
from tests.factories import pipeline
from tests.notebooks.factories import heartbeat_agent

# All databases: a queued node's event is published to the embedded channel layer's table.
pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

TWO_PARALLEL = [{"name": "a", "args": {"code": "pass"}}, {"name": "b", "args": {"code": "pass"}}]


def started(pipe, owner) -> PipelineRun:
    run = start_run(pipe, owner)
    orchestrator.advance_run(run.pk)
    return run


def tasks_of(run: PipelineRun) -> dict[str, tuple[str, str]]:
    return {t.node: (t.status, t.waiting_reason) for t in TaskRun.objects.filter(run=run)}


@pytest.fixture
def agent_row(transactional_db):
    return heartbeat_agent(cpu=8)


def test_a_run_in_flight_runs_all_its_ready_nodes_and_the_next_run_waits_for_it(world, agent_row):
    project = world.project_a
    project.quota.concurrent_runs = 1
    project.quota.save()
    pipe = pipeline(project, world.alice, TWO_PARALLEL)
    first = started(pipe, world.alice)
    # Both nodes of the one run in flight start: the limit counts runs, not tasks.
    assert tasks_of(first) == {"a": ("queued", ""), "b": ("queued", "")}
    second = started(pipe, world.alice)
    reason = "waiting for its run to start — quota 1/1 concurrent runs in flight"
    assert tasks_of(second) == {"a": ("waiting", reason), "b": ("waiting", reason)}


def test_a_run_between_two_nodes_keeps_its_slot(world, agent_row):
    project = world.project_a
    project.quota.concurrent_runs = 1
    project.quota.save()
    chain = [{"name": "a", "args": {"code": "pass"}}, {"name": "b", "depends_on": ["a"], "args": {"code": "pass"}}]
    first = started(pipeline(project, world.alice, chain), world.alice)
    orchestrator.advance_run(first.pk)  # what the agent's report of the start triggers
    first.refresh_from_db()
    assert first.status == "running"
    # Its first node ended and its second is not queued yet: nothing of it is active, yet it is in flight.
    TaskRun.objects.filter(run=first, node="a").update(status="succeeded")
    second = started(pipeline(project, world.alice, TWO_PARALLEL, name="other"), world.alice)
    assert {status for status, _reason in tasks_of(second).values()} == {"waiting"}


def test_concurrent_tasks_caps_tasks_across_runs_and_says_so(world, agent_row):
    project = world.project_a
    project.quota.concurrent_tasks = 1
    project.quota.save()
    run = started(pipeline(project, world.alice, TWO_PARALLEL), world.alice)
    assert tasks_of(run) == {
        "a": ("queued", ""),
        "b": ("waiting", "waiting for a slot — quota 1/1 concurrent tasks in use"),
    }


def test_without_limits_every_ready_node_of_every_run_starts(world, agent_row):
    pipe = pipeline(world.project_a, world.alice, TWO_PARALLEL)
    runs = [started(pipe, world.alice) for _ in range(3)]
    assert all(status == "queued" for run in runs for status, _reason in tasks_of(run).values())
