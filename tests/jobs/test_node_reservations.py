"""Reservations of nodes under the backfill policy (apps/jobs/queue_policy.py `Backfill.reserve_nodes`,
apps/jobs/dispatcher.py): where the runtime names its nodes and says which tasks hold them (the simulated cluster
here; a Kubernetes cluster's inventory), the head of the queue gets the nodes where it fits earliest, and a task
behind it that would run past that time starts only off those nodes or within what they have to spare — and is
submitted kept off them (`Workload.avoid_nodes`), so the runtime cannot place it there. Through the real orchestrator
and dispatcher on the simulated cluster; each job declares its duration as its timeout; virtual seconds."""

from __future__ import annotations

import pytest

from apps.jobs.simulation import replay_portal
from apps.runtime.simulated.cluster import SimCluster, SimulatedRuntime, simulated_runtime
from apps.runtime.simulated.traces import Job, Trace
from apps.runtime.workload import Workload
from portal.lib.resources import Resources
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner(settings, tmp_path):
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    settings.PORTAL_QUEUE_AGING_SECONDS = 0
    return UserFactory(username="sim")


def replay(jobs: list[Job], owner, nodes: int, policy: str = "backfill"):
    outcome, _ = replay_portal(Trace(jobs, {"a": None}), SimCluster(nodes=nodes, gpus_per_node=8), owner, policy=policy)
    by_job = {int(w.key): w for w in outcome.cluster.workloads.values()}
    return outcome.started, by_job


def test_a_long_task_goes_beside_the_reserved_node_and_is_kept_off_it(owner):
    # Job 1 holds 6 GPUs of node-0 until 100, job 2 6 of node-1 until 1000. Job 3 (8 GPUs) fits on node-0 at 100:
    # reserved. Job 4 (2 GPUs, 500 s) would take node-0's 2 free GPUs (first fit) and keep job 3 off it until 503;
    # it goes to node-1 instead, told to keep off node-0, and job 3 starts at 100.
    jobs = [
        Job(1, 0, "a", 6, 1, 0, 100),
        Job(2, 1, "a", 6, 1, 0, 1000),
        Job(3, 2, "a", 8, 1, 0, 60),
        Job(4, 3, "a", 2, 1, 0, 500),
    ]
    started, by_job = replay(jobs, owner, nodes=2)
    assert started == {1: 0, 2: 1, 3: 100, 4: 3}
    assert [p[0] for p in by_job[4].placement] == [1]
    assert by_job[4].avoid == frozenset({0})
    assert [p[0] for p in by_job[3].placement] == [0]


def test_a_task_that_ends_before_the_reservation_may_use_the_reserved_node(owner):
    # Job 4 (2 GPUs, 50 s) ends at 53, before job 3's reservation at 100: it may go on node-0, first fit, unbound.
    jobs = [
        Job(1, 0, "a", 6, 1, 0, 100),
        Job(2, 1, "a", 6, 1, 0, 1000),
        Job(3, 2, "a", 8, 1, 0, 60),
        Job(4, 3, "a", 2, 1, 0, 50),
    ]
    started, by_job = replay(jobs, owner, nodes=2)
    assert started == {1: 0, 2: 1, 3: 100, 4: 3}
    assert [p[0] for p in by_job[4].placement] == [0]
    assert by_job[4].avoid == frozenset()


def test_a_task_takes_what_a_reserved_node_has_to_spare_beside_the_head(owner):
    # One node: job 2 (6 GPUs) is reserved node-0 at 120, where 2 GPUs are left beside it; job 3 (2 GPUs, long) takes
    # them now; job 4 (1 GPU, long) finds nothing left to spare and waits for job 3's or job 2's end.
    jobs = [
        Job(1, 0, "a", 4, 1, 0, 120),
        Job(2, 1, "a", 6, 1, 0, 60),
        Job(3, 2, "a", 2, 1, 0, 600),
        Job(4, 3, "a", 1, 1, 0, 600),
    ]
    started, by_job = replay(jobs, owner, nodes=1)
    assert started == {1: 0, 2: 120, 3: 2, 4: 180}
    assert by_job[3].avoid == frozenset()


def test_a_gang_over_whole_nodes_reserves_those_that_drain_first_and_work_runs_on_the_others(owner):
    # Three nodes. Job 1 holds node-0 until 100, job 2 node-1 until 200, job 3 2 GPUs of node-2 until 5000. Job 4 (16
    # GPUs: two whole nodes) is reserved node-0 and node-1 at 200. Job 5 (4 GPUs, 3000 s) runs on node-2 at once,
    # kept off the two; under a reservation of the pool's total (no nodes known), nothing that runs past 200 could
    # start beside a gang.
    jobs = [
        Job(1, 0, "a", 8, 1, 0, 100),
        Job(2, 1, "a", 8, 1, 0, 200),
        Job(3, 2, "a", 2, 1, 0, 5000),
        Job(4, 3, "a", 16, 1, 0, 60),
        Job(5, 4, "a", 4, 1, 0, 3000),
    ]
    started, by_job = replay(jobs, owner, nodes=3)
    assert started == {1: 0, 2: 1, 3: 2, 4: 201, 5: 4}
    assert sorted(p[0] for p in by_job[4].placement) == [0, 1]
    assert [p[0] for p in by_job[5].placement] == [2]
    assert by_job[5].avoid == frozenset({0, 1})


def test_greedy_queues_never_keep_a_task_off_a_node(owner):
    jobs = [
        Job(1, 0, "a", 6, 1, 0, 100),
        Job(2, 1, "a", 6, 1, 0, 1000),
        Job(3, 2, "a", 8, 1, 0, 60),
        Job(4, 3, "a", 2, 1, 0, 500),
    ]
    _started, by_job = replay(jobs, owner, nodes=2, policy="greedy")
    assert all(not w.avoid for w in by_job.values())


def test_the_simulated_runtime_names_its_nodes_and_the_tasks_holding_them():
    cluster = SimCluster(nodes=2, gpus_per_node=8)
    cluster.duration_of = lambda workload: (workload.uid, 100.0)
    with simulated_runtime(cluster) as runtime:
        runtime.submit(_workload("task-7", gpus=3, task_run=7))
        runtime.submit(_workload("task-8", gpus=8, task_run=8, avoid=["node-0"]))
        capacity = SimulatedRuntime().capacity()
    assert [room.name for room in capacity.nodes] == ["node-0", "node-1"]
    assert [(t, h.gpu) for t, h in capacity.nodes[0].holders] == [(7, 3)]
    assert [(t, h.gpu) for t, h in capacity.nodes[1].holders] == [(8, 8)]


def test_the_simulated_runtime_keeps_a_workload_off_the_nodes_it_avoids_even_while_pending():
    cluster = SimCluster(nodes=2, gpus_per_node=8)
    cluster.duration_of = lambda workload: (workload.uid, 100.0)
    with simulated_runtime(cluster) as runtime:
        runtime.submit(_workload("task-1", gpus=8, task_run=1))  # node-0, until 100
        runtime.submit(_workload("task-2", gpus=8, task_run=2, avoid=["node-1"]))  # node-1 is free: avoided
        assert cluster.workloads["task-2"].phase == "pending"
        cluster.finish_next()
        assert [p[0] for p in cluster.workloads["task-2"].placement] == [0]
        with pytest.raises(ValueError, match="avoid_nodes: no such node: node-9"):
            runtime.submit(_workload("task-3", gpus=1, task_run=3, avoid=["node-9"]))


def _workload(uid: str, *, gpus: int, task_run: int, avoid: list[str] | None = None) -> Workload:
    return Workload(
        uid=uid,
        name=uid,
        project="a",
        command=["true"],
        resources=Resources.of(1, 0, gpus),
        labels={"task_run": str(task_run)},
        avoid_nodes=avoid or [],
    )


def test_under_backfill_only_the_head_has_borrowed_tasks_preempted_for_it():
    # At saturation every waiting task is short of room: if each could preempt borrowed work, none would keep running
    # (the bench measured 558-779 preemptions over a week). The head may: the room freed is what it waits for.
    from datetime import UTC, datetime

    from apps.jobs.dispatcher import _may_claim
    from apps.jobs.queue_policy import Backfill, Reservation, nodes_scope
    from apps.runtime.placement import Pool

    pool, head, other = Pool("simulated"), object(), object()
    plan = Backfill(datetime(2026, 1, 1, tzinfo=UTC), {})
    assert not _may_claim(plan, pool, head)  # no reservation yet: nobody
    plan.reserved[nodes_scope(pool)] = Reservation(head, plan.now, Resources.none(), spare={0: Resources.none()})
    assert _may_claim(plan, pool, head)
    assert not _may_claim(plan, pool, other)
    assert _may_claim(None, pool, other)  # greedy: any task short of room
