"""The greedy queue reads the waiting tasks a chunk at a time and stops once none behind could start
(apps/jobs/queue_scan.py): it starts what a full walk starts, leaves every waiting reason as a full walk writes it,
and a steady pass reads a bounded number of tasks however long the queue is."""

from __future__ import annotations

from unittest import mock

import pytest

from apps.jobs import orchestrator, queue_scan
from apps.jobs.models import PipelineRun, TaskRun, TaskStatus
from apps.jobs.simulation import dispatch_cost, prepare, replay_portal
from apps.projects.models import Quota
from apps.runtime.simulated.cluster import SimCluster
from apps.runtime.simulated.traces import Job, Trace, generate
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner(settings, tmp_path):
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    return UserFactory(username="sim")


def replay_with_reasons(trace: Trace, owner, chunk: int) -> tuple[dict[int, float], list]:
    """The replay's starts, and every waiting task's reason after every pass, read `chunk` tasks at a time."""
    seen = []
    real = orchestrator.dispatch

    def dispatch_and_look(*args, **kwargs):
        result = real(*args, **kwargs)
        waiting = TaskRun.objects.filter(status=TaskStatus.WAITING).order_by("run__number", "run__project__slug")
        seen.append([(t.run.project.slug, t.run.number, t.waiting_reason) for t in waiting.select_related("run")])
        return result

    with (
        mock.patch.object(queue_scan, "FIRST_CHUNK", chunk),
        mock.patch.object(orchestrator, "dispatch", dispatch_and_look),
    ):
        outcome, _ = replay_portal(trace, SimCluster(nodes=2, gpus_per_node=4), owner, policy="greedy")
    PipelineRun.objects.all().delete()  # the next replay numbers its runs from 1 again
    return outcome.started, seen


def test_reading_one_task_at_a_time_starts_and_tells_exactly_what_a_full_walk_does(owner):
    # Quotas that bind (the generator over-commits them), priorities, jobs of 1-8 GPUs: every pass's starts and every
    # waiting task's reason after it are the same whether the pass stops early (chunks of 1) or reads the whole queue.
    trace = generate(jobs=60, gpus=8, load=1.6, teams=3, seed=4, high_priority_share=0.3)
    early = replay_with_reasons(trace, owner, chunk=1)
    full = replay_with_reasons(trace, owner, chunk=10**6)
    assert early[0] == full[0]
    assert early[1] == full[1]
    assert any(reason.startswith("waiting for 1 GPU — quota") for seen in full[1] for *_key, reason in seen)
    assert any(" free on this machine" in reason for seen in full[1] for *_key, reason in seen)


def test_so_it_does_with_limits_on_concurrent_tasks_and_runs(owner):
    trace = generate(jobs=40, gpus=8, load=1.6, teams=2, seed=5)
    for limits in ({"concurrent_tasks": 2}, {"concurrent_runs": 1}):
        projects = prepare(trace, owner)
        Quota.objects.filter(project=projects["team-01"]).update(**limits)
        early = replay_with_reasons(trace, owner, chunk=1)
        assert early == replay_with_reasons(trace, owner, chunk=10**6)
        assert any("concurrent" in reason for seen in early[1] for *_key, reason in seen)


def test_an_unread_task_whose_quota_is_freed_but_finds_no_room_is_told_so(owner):
    # Team a (quota 2) holds 2 GPUs, team b the other 6 (2 nodes of 4); b's job 5 waits for room, a's job 6 for its
    # quota. When a's job 1 ends, b's job 5 (older) takes the GPU: a's job 6, behind it and not read by a pass that
    # stops there, now waits for room, no longer for its quota (a holds 1 of 2), and says so.
    jobs = [
        Job(1, 0, "a", 1, 1, 0, 60),
        Job(2, 0, "a", 1, 1, 0, 600),
        Job(3, 1, "b", 4, 1, 0, 600),
        Job(4, 1, "b", 2, 1, 0, 600),
        Job(5, 2, "b", 1, 1, 0, 600),
        Job(6, 3, "a", 1, 1, 0, 600),
    ]
    trace = Trace(jobs, {"a": 2, "b": 8})
    early = replay_with_reasons(trace, owner, chunk=1)
    assert early == replay_with_reasons(trace, owner, chunk=10**6)
    starts, seen = early
    assert (starts[3], starts[4], starts[5]) == (1, 1, 60)
    told = [reason for after in seen for slug, number, reason in after if (slug, number) == ("a", 3)]
    assert list(dict.fromkeys(told)) == [
        "waiting for 1 GPU — quota 2/2 in use",
        "waiting for 1 GPU — 0 of 8 free on this machine",
    ]


def test_a_steady_pass_reads_a_bounded_number_of_waiting_tasks_however_long_the_queue(owner):
    read = []
    real = queue_scan.Queue.settle

    def settle(queue):
        read.append(queue.read)
        return real(queue)

    with mock.patch.object(queue_scan.Queue, "settle", settle):
        dispatch_cost(gpus=8, queued=100, owner=owner, teams=2, repeats=1)
        short = read[-1]
        dispatch_cost(gpus=8, queued=1000, owner=owner, teams=2, repeats=1)
        long = read[-1]
    assert short == long == queue_scan.FIRST_CHUNK
    assert read[0] < 100  # the first pass too stops once the cluster is full: 8 start, 32 + 64 are read
