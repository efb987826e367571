"""The local agent advances the runs of the tasks it ran (apps/jobs/runtime_hooks.py, TaskListener.changed_many): after
the first dispatch a run goes to its end with no Celery worker and nobody driving it, each next task taken by the agent
straight from the advance that made it ready."""

from __future__ import annotations

import time

import pytest

from apps.jobs import orchestrator
from apps.jobs.models import LogLine, PipelineRun
from apps.jobs.services import start_run
from apps.runtime.models import Agent, LocalWorkload
from tests.factories import ProjectFactory, UserFactory, pipeline

pytestmark = [pytest.mark.live]


def wait_until_finished(run: PipelineRun, timeout: float = 60) -> PipelineRun:
    """Only look (an advance here would do the agent's work)."""
    deadline = time.monotonic() + timeout
    while not run.is_finished:
        assert time.monotonic() < deadline, f"run still {run.status}: {list(run.tasks.values('node', 'status'))}"
        time.sleep(0.1)
        run.refresh_from_db()
    return run


def test_a_run_goes_to_its_end_with_only_the_agent(agent):
    owner = UserFactory(username="alice")
    project = ProjectFactory(owner=owner, slug="project-a")
    nodes = [
        {"name": "a", "args": {"code": "print('a')"}},
        {"name": "b", "depends_on": ["a"], "args": {"code": "print('b')"}},
        {"name": "c", "depends_on": ["a"], "args": {"code": "print('c')"}},
        {"name": "d", "depends_on": ["b", "c"], "args": {"code": "raise SystemExit(0)"}},
    ]
    run = start_run(pipeline(project, owner, nodes), owner)
    orchestrator.advance_run(run.pk)  # the first dispatch: what a worker does after start_run

    run = wait_until_finished(run)
    assert run.status == "succeeded", run.reason
    tasks = {t.node: t for t in run.tasks.all()}
    assert {node: t.status for node, t in tasks.items()} == dict.fromkeys("abcd", "succeeded")
    assert all(t.started_at <= t.finished_at for t in tasks.values())
    assert tasks["d"].started_at >= max(tasks["b"].finished_at, tasks["c"].finished_at)
    assert dict(LogLine.objects.filter(run=run).values_list("node", "text")) == {"a": "a", "b": "b", "c": "c"}
    me = Agent.objects.get(pid=agent.proc.pid)
    assert set(LocalWorkload.objects.values_list("agent_id", "state")) == {(me.pk, "succeeded")}
