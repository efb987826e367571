"""Gang admission: the queue hands a task to the runtime only when all its replicas fit on the nodes the runtime
reports (apps/runtime/workload.py: place_replicas), not merely in the pool's total; through the real dispatcher on
the simulated cluster, whose nodes its capacity reports."""

from __future__ import annotations

import pytest

from apps.jobs.models import TaskRun, TaskStatus
from apps.jobs.simulation import replay_portal
from apps.runtime.kubernetes.capacity import capacity_of
from apps.runtime.simulated.cluster import SimCluster
from apps.runtime.simulated.traces import Job, Trace
from apps.runtime.workload import NodeRoom, place_replicas
from portal.lib.resources import Resources
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner(settings, tmp_path):
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    return UserFactory(username="sim")


def room(free_gpus: int, gpus: int = 8) -> NodeRoom:
    return NodeRoom(Resources.of(64, 0, free_gpus), Resources.of(64, 0, gpus))


def test_all_replicas_fit_on_the_nodes_or_none_is_placed():
    nodes = [room(8), room(4)]
    assert place_replicas(nodes, Resources.of(1, 0, 4), 3) == [(0, Resources.of(1, 0, 4))] * 2 + [
        (1, Resources.of(1, 0, 4))
    ]
    assert place_replicas(nodes, Resources.of(1, 0, 4), 4) is None  # 16 GPUs free in total, room for 3 replicas
    assert place_replicas(nodes, Resources.of(1, 0, 5), 2) is None
    assert nodes == [room(8), room(4)]  # unchanged


def test_a_replica_larger_than_a_node_takes_whole_idle_nodes():
    assert place_replicas([room(8), room(7), room(8)], Resources.of(2, 0, 16), 1) == [
        (0, Resources.of(1, 0, 8)),
        (2, Resources.of(1, 0, 8)),
    ]
    assert place_replicas([room(8), room(7), room(7)], Resources.of(2, 0, 16), 1) is None


def test_a_job_whose_gpus_are_free_only_in_fragments_waits_in_the_queue_saying_so(owner):
    # Jobs 1 and 2 take 4 GPUs on nodes 0 and 1 (job 1 takes node 0's CPUs): 16 GPUs are free, but one node is idle.
    # Job 3 (16 GPUs: two whole nodes) waits in the queue, not in the runtime, until job 1 ends and frees node 0;
    # job 4 (1 GPU, short) starts meanwhile without delaying it.
    jobs = [
        Job(1, 0, "a", 4, 60, 0, 600),
        Job(2, 1, "a", 4, 8, 0, 1200),
        Job(3, 2, "a", 16, 2, 0, 60),
        Job(4, 3, "a", 1, 1, 0, 60),
    ]
    seen = {}
    cluster = SimCluster(nodes=3, gpus_per_node=8, cpus_per_node=64)

    def look(c: SimCluster) -> None:
        if len(c.workloads) == 3 and c.now == 3:  # job 4 has just started
            task = TaskRun.objects.get(run__pipeline_name="sim", run__number=3)
            seen["job 3"] = (task.status, task.waiting_reason, len(c.pending))

    cluster.on_change = look
    outcome, _ = replay_portal(Trace(jobs, {"a": None}), cluster, owner)
    assert "job 3" in seen, outcome.started
    status, reason, pending = seen["job 3"]
    assert status == TaskStatus.WAITING
    assert reason == (
        "waiting for 16 GPUs — free in total on this machine, but on no node (or whole idle nodes) that takes it"
    )
    assert pending == 0  # nothing handed to the runtime that it cannot place
    assert outcome.started == {1: 0, 2: 1, 3: 600, 4: 3}


def test_a_cluster_reports_the_free_room_of_each_usable_node():
    inventory = {
        "nodes": [
            {"name": "a", "ready": True, "schedulable": True, "allocatable": {"cpu": 16, "memory_bytes": 64, "gpu": 8},
             "requested": {"cpu": 4, "memory_bytes": 16, "gpu": 6}},
            {"name": "b", "ready": False, "schedulable": True, "allocatable": {"cpu": 16, "memory_bytes": 64, "gpu": 8},
             "requested": {}},
        ],
        "error": "",
    }  # fmt: skip
    capacity = capacity_of(inventory)
    assert capacity.gpu == 2
    assert capacity.nodes == (NodeRoom(Resources.of(12, 48, 2), Resources.of(16, 64, 8), name="a"),)
