"""Borrowing idle room above quota and preempting it back (apps/jobs/borrowing.py), through the real orchestrator and
dispatcher on the simulated cluster (apps/jobs/simulation.py, "+borrow": PORTAL_QUEUE_BORROWING). One 8-GPU node;
projects "a" and "b" may hold 4 GPUs each. Times are the replay's virtual seconds."""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

import pytest

from apps.jobs.models import TaskRun, TaskStatus
from apps.jobs.orchestrator import PREEMPTED, REQUEUE_BACKOFF
from apps.jobs.simulation import replay_portal
from apps.runtime.simulated.cluster import SimCluster
from apps.runtime.simulated.replay import summarise
from apps.runtime.simulated.traces import Job, Trace, generate
from apps.runtime.workload import Phase
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

QUOTAS = {"a": 4, "b": 4}


@pytest.fixture
def owner(settings, tmp_path):
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    return UserFactory(username="sim")


def replay(jobs: list[Job], owner, policy: str = "greedy+borrow", quotas=QUOTAS, nodes: int = 1):
    cluster = SimCluster(nodes=nodes, gpus_per_node=8)
    outcome, _decider = replay_portal(Trace(jobs, dict(quotas)), cluster, owner, policy=policy)
    return outcome, cluster


def attempts(job_number: int, project: str = "a") -> list[TaskRun]:
    return list(TaskRun.objects.filter(run__project__slug=project, run__number=job_number).order_by("attempt"))


def a_fills_the_node(preemptible=(True,) * 8) -> list[Job]:
    """Project a: eight 1-GPU jobs of 1000 s at time 0 (its first four within its quota, the others above it)."""
    return [Job(i, 0, "a", 1, 1, 0, 1000, preemptible=preemptible[i - 1]) for i in range(1, 9)]


def test_without_borrowing_a_project_waits_for_its_quota_although_the_node_idles(owner):
    outcome, _ = replay(a_fills_the_node(), owner, policy="greedy")
    assert outcome.started == {1: 0, 2: 0, 3: 0, 4: 0, 5: 1000, 6: 1000, 7: 1000, 8: 1000}


def test_it_borrows_idle_room_above_the_quota(owner):
    outcome, cluster = replay(a_fills_the_node(), owner)
    assert outcome.started == dict.fromkeys(range(1, 9), 0)
    assert [t.borrowed for n in range(1, 9) for t in attempts(n)] == [False] * 4 + [True] * 4
    assert cluster.lost_gpu_seconds == 0  # nobody needed the room back


def test_borrowing_takes_only_room_that_no_task_within_its_quota_waits_for(owner):
    # At 100 b's first job ends: a's job 3 (waiting since 1, above a's quota) is older than b's job 4 (within b's
    # quota once its first job ended); b's gets the room, and a's borrows the room only once it idles again.
    jobs = [
        Job(1, 0, "a", 4, 1, 0, 1000),
        Job(2, 0, "b", 4, 1, 0, 100),
        Job(3, 1, "a", 4, 1, 0, 50),
        Job(4, 2, "b", 4, 1, 0, 50),
    ]
    outcome, _ = replay(jobs, owner)
    assert outcome.started == {1: 0, 2: 0, 3: 150, 4: 100}
    assert [t.borrowed for t in TaskRun.objects.order_by("run__created_at")] == [False, False, True, False]


def test_preemption_gives_a_project_under_its_quota_its_room_and_the_preempted_tasks_rerun_later(owner):
    # a borrows the whole node's other half; at 10, b (under its quota) needs 4 GPUs: a's four borrowed tasks are
    # preempted (cancelled, not failed) and b starts at once. They are requeued, wait out the requeue backoff (300 s)
    # and run again, all 1000 s, at the next event after it: at 1000, when a's first four end.
    jobs = [*a_fills_the_node(), Job(9, 10, "b", 4, 1, 0, 100)]
    outcome, cluster = replay(jobs, owner)
    assert outcome.started[9] == 10
    assert outcome.ended[9] == 110
    for number in range(5, 9):
        first, second = attempts(number)
        assert (first.status, first.reason, first.borrowed) == (TaskStatus.CANCELLED, PREEMPTED, True)
        assert second.status == TaskStatus.SUCCEEDED
        assert second.created_at == first.created_at  # requeued in its old place
        assert second.not_before == first.finished_at + timedelta(seconds=REQUEUE_BACKOFF)
        assert outcome.ended[number] == 1000 + 1000  # reran its full duration
    assert [len(attempts(n)) for n in range(1, 5)] == [1, 1, 1, 1]  # a's tasks within its quota were left alone
    assert summarise(outcome).preempted == 4
    assert cluster.lost_gpu_seconds == 4 * 10
    assert outcome.unfinished == 0


def test_only_as_many_borrowed_tasks_as_needed_are_preempted_youngest_first(owner):
    # a's borrowed jobs 5-8 started at 0, 1, 2 and 3; b needs 2 GPUs: the two youngest (8, then 7) go.
    jobs = [*(Job(i, 0, "a", 1, 1, 0, 1000) for i in range(1, 5))]
    jobs += [Job(i, i - 5, "a", 1, 1, 0, 1000) for i in range(5, 9)]
    jobs.append(Job(9, 10, "b", 2, 1, 0, 100))
    outcome, _ = replay(jobs, owner)
    assert outcome.started[9] == 10
    assert [len(attempts(n)) for n in range(5, 9)] == [1, 1, 2, 2]


def test_a_non_preemptible_task_never_borrows_so_is_never_preempted(owner):
    # Jobs 5 and 6 are preemptible and borrow; 7 and 8 are not: they wait for a's quota. b needs 4 GPUs at 10: the
    # two free GPUs and the two borrowed ones; only 5 and 6 are preempted.
    jobs = [*a_fills_the_node(preemptible=(True,) * 6 + (False, False)), Job(9, 10, "b", 4, 1, 0, 100)]
    outcome, cluster = replay(jobs, owner)
    assert outcome.started[9] == 10
    assert outcome.started[7] == outcome.started[8] == 1000
    assert [len(attempts(n)) for n in (1, 2, 3, 4, 7, 8)] == [1] * 6
    assert [len(attempts(n)) for n in (5, 6)] == [2, 2]
    stopped = {w.key for w in cluster.workloads.values() if w.phase == Phase.CANCELLED}
    assert stopped == {"5", "6"}


def test_no_preemption_when_the_borrowed_room_would_not_start_the_task(owner):
    # b (quota 6 here) holds 2 GPUs from 0; a holds its 4 and borrows 2 (jobs 5 and 6; 7 and 8 do not borrow). At 10 b
    # needs 4 more: nothing is free and a's borrowed tasks hold only 2, so stopping them would not start it: neither
    # is preempted. At 1000 every job of a's first eight but 7 and 8 ends (5 and 6 within a's quota by then): it starts.
    jobs = [*a_fills_the_node(preemptible=(False,) * 4 + (True, True, False, False))]
    jobs += [Job(9, 0, "b", 2, 1, 0, 2000), Job(10, 10, "b", 4, 1, 0, 100)]
    outcome, cluster = replay(jobs, owner, quotas={"a": 4, "b": 6})
    assert outcome.started[5] == outcome.started[6] == outcome.started[9] == 0
    assert outcome.started[10] == 1000
    assert cluster.lost_gpu_seconds == 0
    assert [len(attempts(n)) for n in (5, 6)] == [1, 1]


def test_a_borrowed_task_whose_project_falls_back_under_its_quota_is_no_longer_preempted(owner):
    # a's job 5 borrows from 0; a's job 1 ends at 50, so job 5 is within a's quota from then on. At 60 b needs 5 GPUs:
    # 4 are free, and preempting job 5 would give the fifth, but it is no longer borrowed: b waits for a's jobs.
    jobs = [Job(1, 0, "a", 1, 1, 0, 50), *(Job(i, 0, "a", 1, 1, 0, 1000) for i in range(2, 6))]
    jobs.append(Job(6, 60, "b", 5, 1, 0, 100))
    outcome, cluster = replay(jobs, owner, quotas={"a": 4, "b": 8})
    assert outcome.started[6] == 1000
    assert cluster.lost_gpu_seconds == 0
    assert [t.borrowed for t in attempts(5)] == [False]


def test_nobody_starves_and_quotas_hold_without_the_borrowed_tasks(owner):
    # A generated trace that overloads the cluster, all jobs preemptible: every job ends, having run its full duration
    # once, and at every start and end each project's tasks within its quota hold no more than its quota.
    trace = generate(jobs=50, gpus=16, load=1.8, teams=3, seed=2)
    cluster = SimCluster(nodes=2, gpus_per_node=8)
    jobs = {str(j.id): j for j in trace.jobs}

    def check(c: SimCluster) -> None:
        assert sum(n.gpus - n.free_gpus for n in c.nodes) <= 16
        held = defaultdict(int)
        for task in TaskRun.objects.filter(status__in=("queued", "running"), borrowed=False).select_related("run"):
            held[task.run.project.slug] += task.resources["gpu"]
        for project, gpus in held.items():
            assert gpus <= trace.quotas[project], (c.now, project, gpus)

    cluster.on_change = check
    outcome, _ = replay_portal(trace, cluster, owner, policy="greedy+borrow")
    assert outcome.unfinished == 0
    for w in cluster.workloads.values():
        if w.phase == Phase.SUCCEEDED:
            assert w.ended_at - w.started_at == pytest.approx(jobs[w.key].duration)
    assert TaskRun.objects.filter(status=TaskStatus.FAILED).count() == 0
    assert summarise(outcome).preempted > 0  # the trace does exercise preemption


def test_a_claim_stops_the_borrowed_tasks_on_the_node_where_the_claimant_then_fits(owner):
    # Two nodes. a (quota 4) holds 4 GPUs on node 0 and borrows 4 more there (job 2, from 0) and 2 on node 1 (job 4,
    # from 2, beside b's 6). At 10 b (quota 10) needs 4: stopping job 4, the youngest, frees only 2 GPUs on node 1,
    # where the task would still not fit; job 2 alone frees node 0's 4. By the pool's total, job 4 went first and
    # job 2 after it: two tasks stopped where one starts it.
    jobs = [
        Job(1, 0, "a", 4, 1, 0, 1000),
        Job(2, 0, "a", 4, 1, 0, 1000),
        Job(3, 1, "b", 6, 1, 0, 1000),
        Job(4, 2, "a", 2, 1, 0, 1000),
        Job(5, 10, "b", 4, 1, 0, 100),
    ]
    outcome, cluster = replay(jobs, owner, quotas={"a": 4, "b": 10}, nodes=2)
    assert outcome.started[5] == 10
    assert [len(attempts(n)) for n in (2, 3)] == [2, 1]  # a's runs #2 and #3: jobs 2 and 4
    assert {w.key for w in cluster.workloads.values() if w.phase == Phase.CANCELLED} == {"2"}


def test_no_claim_where_no_node_would_hold_the_claimant_and_the_room_stays_open(owner):
    # Three nodes; c's long 1-GPU jobs 1 and 3 sit on nodes 0 and 1 (job 2 fills node 0 for a second, so that job 3
    # goes to node 1), a's job 4 beside job 3, all within their quotas. At 10 b needs two whole nodes (16 GPUs): 22
    # GPUs are free in all but one node is whole, and no borrowed task stands in its way. It claims nothing and waits
    # for its reservation (nodes 0 and 2 at 1000). At 20 a's job 6, above a's quota, borrows a GPU for 100 s, ending
    # before that: it starts at once. A claim that freed nothing used to set the pool's room aside for b and keep
    # every borrower out until b started.
    jobs = [
        Job(1, 0, "c", 1, 1, 0, 1000),
        Job(2, 0, "c", 7, 1, 0, 1),
        Job(3, 0, "c", 1, 1, 0, 1000),
        Job(4, 0, "a", 1, 1, 0, 5000),
        Job(5, 10, "b", 16, 1, 0, 100),
        Job(6, 20, "a", 1, 1, 0, 100),
    ]
    outcome, cluster = replay(jobs, owner, policy="backfill+borrow", quotas={"a": 1, "b": 16, "c": 9}, nodes=3)
    assert outcome.started[6] == 20
    assert [t.borrowed for t in attempts(2)] == [True]  # a's run #2: job 6
    assert outcome.started[5] == 1000
    assert cluster.lost_gpu_seconds == 0


def test_where_several_nodes_would_do_the_claim_stops_the_least_work(owner):
    # Two full nodes: on node 0 a's job 2 (1 GPU) borrows from 0 beside a's 7; on node 1 a's job 4 (4 GPUs) borrows
    # from 5 beside c's 4. At 10 b needs 1 GPU: either stop makes room. Job 4 is the youngest, but it has run 20
    # GPU-seconds against job 2's 10: job 2 is stopped.
    jobs = [
        Job(1, 0, "a", 7, 1, 0, 1000),
        Job(2, 0, "a", 1, 1, 0, 1000),
        Job(3, 5, "c", 4, 1, 0, 1000),
        Job(4, 5, "a", 4, 1, 0, 1000),
        Job(5, 10, "b", 1, 1, 0, 100),
    ]
    outcome, cluster = replay(jobs, owner, quotas={"a": 7, "b": 1, "c": 4}, nodes=2)
    assert outcome.started[5] == 10
    assert [len(attempts(n)) for n in (2, 3)] == [2, 1]  # a's runs #2 and #3: jobs 2 and 4
    assert cluster.lost_gpu_seconds == 10
