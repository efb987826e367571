"""The portal's own orchestrator and dispatcher replaying a trace on the simulated cluster (apps/jobs/simulation.py):
every decision is theirs; the cluster checks that they never hand out more than it has, nor more than a project's
quota."""

from __future__ import annotations

from collections import defaultdict

import pytest

from apps.jobs.models import PipelineRun, RunStatus, TaskRun, TaskStatus
from apps.jobs.simulation import dispatch_cost, replay_portal
from apps.runtime import base
from apps.runtime.simulated.cluster import SimCluster
from apps.runtime.simulated.replay import Fifo, replay, summarise
from apps.runtime.simulated.traces import Job, Trace, generate
from apps.runtime.workload import Phase
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner(settings, tmp_path):
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    return UserFactory(username="sim")


def watch(cluster: SimCluster, trace: Trace, seen: list) -> None:
    """After every start and end: no node past its capacity, no project holding more GPUs than its quota (what runs
    and what the runtime was handed and has not placed yet)."""
    jobs = {str(j.id): j for j in trace.jobs}

    def check(c: SimCluster) -> None:
        for node in c.nodes:
            assert 0 <= node.free_gpus <= node.gpus
            assert node.free_cpus >= -1e-9
            assert node.free_memory >= 0
        held = defaultdict(int)
        for w in c.workloads.values():
            if w.phase in (Phase.PENDING, Phase.RUNNING):
                held[jobs[w.key].project] += w.gpus
        for project, gpus in held.items():
            assert gpus <= trace.quotas[project], (c.now, project, gpus)
        seen.append((c.now, c.busy_gpus))

    cluster.on_change = check


def test_the_dispatcher_replays_a_trace_within_capacity_and_quotas(owner):
    trace = generate(jobs=40, gpus=16, load=1.5, teams=3, seed=5)
    cluster = SimCluster(nodes=2, gpus_per_node=8)
    seen: list = []
    watch(cluster, trace, seen)
    outcome, policy = replay_portal(trace, cluster, owner)
    assert outcome.unfinished == 0
    assert len(outcome.ended) == 40
    assert policy.passes == 80
    assert max(busy for _t, busy in seen) <= 16
    assert PipelineRun.objects.filter(pipeline_name="sim", status=RunStatus.SUCCEEDED).count() == 40
    assert TaskRun.objects.filter(run__pipeline_name="sim", status=TaskStatus.SUCCEEDED).count() == 40
    assert "simulated" not in base.RUNTIMES  # put back after the replay


def test_a_replay_is_deterministic(owner):
    trace = generate(jobs=30, gpus=16, load=1.3, teams=2, seed=9)
    first, _ = replay_portal(trace, SimCluster(nodes=2, gpus_per_node=8), owner)
    second, _ = replay_portal(trace, SimCluster(nodes=2, gpus_per_node=8), owner)
    assert first.started == second.started
    assert first.ended == second.ended
    assert summarise(first).utilisation == summarise(second).utilisation


def test_the_dispatcher_waits_for_quota_and_follows_priority(owner):
    # One 8-GPU node; project "a" may hold 4 GPUs. Job 1 holds a's quota; job 2 (a, 2 GPUs) must wait for it although
    # the node has room, and job 3 (b) starts beside. Job 5 (priority 1) starts before job 4 when room frees.
    jobs = [
        Job(1, 0, "a", 4, 1, 0, 100),
        Job(2, 1, "a", 2, 1, 0, 10),
        Job(3, 2, "b", 4, 1, 0, 50),
        Job(4, 3, "b", 4, 1, 0, 10),
        Job(5, 4, "b", 4, 1, 0, 10, priority=1),
    ]
    trace = Trace(jobs, {"a": 4, "b": 8})
    outcome, _ = replay_portal(trace, SimCluster(nodes=1, gpus_per_node=8), owner)
    assert outcome.started[3] == 2
    assert outcome.started[2] == 100  # waited for a's quota, not for room
    assert outcome.started[5] == 52
    assert outcome.started[4] == 62
    waiting = TaskRun.objects.filter(run__pipeline_name="sim").exclude(waiting_reason="")
    assert not waiting.exists()  # cleared when they started


def test_the_greedy_policy_lets_small_jobs_pass_a_large_one(owner):
    # The queue before reservations (PORTAL_QUEUE_POLICY=greedy), what FIFO would not do and what starves large jobs
    # (docs/scheduling.md): job 2 (8 GPUs) waits for the whole node while job 3 (1 GPU, long), submitted after it,
    # starts at once in the room left and keeps job 2 waiting until it ends.
    jobs = [Job(1, 0, "a", 4, 1, 0, 100), Job(2, 1, "a", 8, 1, 0, 10), Job(3, 2, "a", 1, 1, 0, 200)]
    trace = Trace(jobs, {"a": None})
    portal, _ = replay_portal(trace, SimCluster(nodes=1, gpus_per_node=8), owner, policy="greedy")
    fifo_cluster = SimCluster(nodes=1, gpus_per_node=8)
    fifo = replay(trace, fifo_cluster, Fifo(fifo_cluster))
    assert portal.started == {1: 0, 2: 202, 3: 2}
    assert fifo.started == {1: 0, 2: 100, 3: 110}


def test_the_simulated_runtime_is_never_a_choice_of_a_project(owner):
    from django.core.exceptions import ValidationError

    from apps.projects.services import validate_runtime
    from apps.runtime.simulated.cluster import simulated_runtime

    assert "simulated" not in base.RUNTIMES
    with simulated_runtime(SimCluster(nodes=1)), pytest.raises(ValidationError):
        validate_runtime("simulated")
    with pytest.raises(LookupError, match="unknown runtime 'simulated'"):
        base.get_runtime("simulated")


def test_dispatch_cost_measures_a_pass_and_leaves_no_task_waiting(owner):
    cost = dispatch_cost(gpus=16, queued=40, owner=owner, teams=2, repeats=1)
    assert cost["first"] > 0
    assert cost["steady"] > 0
    assert not TaskRun.objects.filter(status__in=(TaskStatus.WAITING, TaskStatus.QUEUED)).exists()
    assert TaskRun.objects.filter(run__pipeline_name="cost", status=TaskStatus.SUCCEEDED).count() == 1


def test_a_steady_pass_makes_as_many_queries_for_600_waiting_runs_as_for_100(owner):
    # Past the 512 plans runstate keeps, a pass once read each waiting run's spec again, one query per run. (Below
    # the queue's first chunk, 32 tasks, a pass reads the whole queue and asks nothing more: a few queries fewer.)
    few = dispatch_cost(gpus=8, queued=100, owner=owner, teams=2, repeats=1)
    many = dispatch_cost(gpus=8, queued=600, owner=owner, teams=2, repeats=1)
    assert many["steady_queries"] == few["steady_queries"]
