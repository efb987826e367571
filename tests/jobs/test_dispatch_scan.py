"""Both queue policies read the waiting tasks a chunk at a time and stop once none behind could start
(apps/jobs/queue_scan.py; "backfill" in its own order, `BackfillQueue`): a pass starts what a full walk starts, leaves
every waiting reason as a full walk writes it, and a steady pass reads a bounded number of tasks however long the
queue is."""

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


def replay_with_reasons(
    trace: Trace, owner, chunk: int, policy: str = "greedy", nodes: int = 2, stops: list | None = None
) -> tuple[dict[int, float], list]:
    """The replay's starts, and every waiting task's reason after every pass, read `chunk` tasks at a time. `stops`:
    gets, for each backfill pass that stopped early, the tasks it read and how many were waiting."""
    seen = []
    real = orchestrator.dispatch
    settle = queue_scan.BackfillQueue.settle

    def dispatch_and_look(*args, **kwargs):
        result = real(*args, **kwargs)
        waiting = TaskRun.objects.filter(status=TaskStatus.WAITING).order_by("run__number", "run__project__slug")
        seen.append([(t.run.project.slug, t.run.number, t.waiting_reason) for t in waiting.select_related("run")])
        return result

    def settle_and_count(queue):
        if queue.stopped and stops is not None:
            stops.append((queue.read, TaskRun.objects.filter(status=TaskStatus.WAITING).count()))
        return settle(queue)

    with (
        mock.patch.object(queue_scan, "FIRST_CHUNK", chunk),
        mock.patch.object(orchestrator, "dispatch", dispatch_and_look),
        mock.patch.object(queue_scan.BackfillQueue, "settle", settle_and_count),
    ):
        outcome, _ = replay_portal(trace, SimCluster(nodes=nodes, gpus_per_node=4), owner, policy=policy)
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


# Backfill (apps/jobs/queue_scan.py `BackfillQueue`): the same replays, in backfill's order, with reservations of
# nodes (the simulated cluster names its nodes and the tasks on them), binding quotas and timeouts declared per job.


@pytest.mark.parametrize("policy", ["backfill", "backfill+age"])
def test_backfill_read_one_task_at_a_time_starts_and_tells_exactly_what_its_full_walk_does(owner, settings, policy):
    # Aging levels of 10 minutes, at most 3: tasks cross them while they wait (the trace spans hours), and the
    # order moves with them; with fair share, with the shares held too.
    settings.PORTAL_QUEUE_AGING_SECONDS, settings.PORTAL_QUEUE_AGING_MAX = 600, 3
    trace = generate(jobs=60, gpus=8, load=1.6, teams=3, seed=4, high_priority_share=0.3)
    stops: list = []
    early = replay_with_reasons(trace, owner, chunk=1, policy=policy, stops=stops)
    full = replay_with_reasons(trace, owner, chunk=10**6, policy=policy)
    assert early[0] == full[0]
    assert early[1] == full[1]
    reasons = {reason for seen in full[1] for *_key, reason in seen}
    assert any(r.startswith("waiting for its turn — room is reserved for run") for r in reasons)
    assert any(" — quota " in r for r in reasons)
    assert any(read < waiting for read, waiting in stops)  # passes did stop before the end of the queue


def test_backfill_so_it_does_with_limits_on_concurrent_tasks_and_runs(owner):
    trace = generate(jobs=40, gpus=8, load=1.6, teams=2, seed=5)
    for limits in ({"concurrent_tasks": 2}, {"concurrent_runs": 1}):
        projects = prepare(trace, owner)
        Quota.objects.filter(project=projects["team-01"]).update(**limits)
        early = replay_with_reasons(trace, owner, chunk=1, policy="backfill")
        assert early == replay_with_reasons(trace, owner, chunk=10**6, policy="backfill")
        assert any("concurrent" in reason for seen in early[1] for *_key, reason in seen)
        Quota.objects.filter(project=projects["team-01"]).update(concurrent_tasks=None, concurrent_runs=None)


def test_backfill_tasks_held_back_by_a_reservation_are_told_so_without_being_read(owner):
    # One node of 4 GPUs. Job 1 holds 2 until 600; job 2 (4 GPUs) is reserved the node at 600. Jobs 3-8 (1 GPU, an
    # hour each) fit now but would delay it: they wait for their turn. A pass that reads one task stops after job 2
    # (job 3's group — a's 1-GPU hour-long tasks — is held back, and nothing not read could reserve room ahead of
    # them), and tells jobs 3-8 why all the same.
    jobs = [Job(1, 0, "a", 2, 1, 0, 600), Job(2, 1, "a", 4, 1, 0, 60)]
    jobs += [Job(i, 2 + i, "a", 1, 1, 0, 3600) for i in range(3, 9)]
    trace = Trace(jobs, {"a": None})
    stops: list = []
    early = replay_with_reasons(trace, owner, chunk=1, policy="backfill+age", nodes=1, stops=stops)
    assert early == replay_with_reasons(trace, owner, chunk=10**6, policy="backfill+age", nodes=1)
    starts, seen = early
    assert starts[2] == 600
    assert all(starts[i] >= 600 + 60 for i in range(3, 9))
    told = {reason for after in seen for slug, number, reason in after if number >= 3}
    assert "waiting for its turn — room is reserved for run a #2, ahead in the queue" in told
    assert any(read < waiting for read, waiting in stops)


def test_backfill_reads_on_when_a_task_not_read_would_reserve_room_ahead_of_one_held_back(owner):
    # One node of 4 GPUs, by age. a (quota 4 GPUs) holds 2 until 600 (job 1). Job 2 (a, 3 GPUs) is refused by the
    # quota and reserves it for 600, 1 GPU to spare; job 3 (a, 2 GPUs, an hour) fits now but would delay it: held
    # back by a's quota. Job 4 (b, 4 GPUs) is refused for room and reserves the node for 600. Job 5 (a, 2 GPUs, an
    # hour) is then held back by the node's reservation, checked before the quota's: "reserved for run b #1". A pass
    # that has read only job 2 must not stop there and give job 5 job 3's reason: job 4, not read, would reserve the
    # node ahead of it.
    jobs = [
        Job(1, 0, "a", 2, 1, 0, 600),
        Job(2, 1, "a", 3, 1, 0, 60),
        Job(3, 2, "a", 2, 1, 0, 3600),
        Job(4, 3, "b", 4, 1, 0, 60),
        Job(5, 4, "a", 2, 1, 0, 3600),
    ]
    trace = Trace(jobs, {"a": 4, "b": None})
    early = replay_with_reasons(trace, owner, chunk=1, policy="backfill+age", nodes=1)
    assert early == replay_with_reasons(trace, owner, chunk=10**6, policy="backfill+age", nodes=1)
    _starts, seen = early
    first = next(after for after in seen if ("a", 4) in {(slug, number) for slug, number, _reason in after})
    after_job_5 = {(slug, number): reason for slug, number, reason in first}
    assert after_job_5[("a", 3)] == "waiting for its turn — room is reserved for run a #2, ahead in the queue"
    assert after_job_5[("a", 4)] == "waiting for its turn — room is reserved for run b #1, ahead in the queue"


def test_a_steady_backfill_pass_reads_a_bounded_number_of_waiting_tasks_however_long_the_queue(owner):
    from django.test.utils import override_settings

    from apps.jobs.simulation import policy_settings

    read = []
    real = queue_scan.BackfillQueue.settle

    def settle(queue):
        read.append((queue.read, queue.stopped))
        return real(queue)

    for policy in ("backfill", "backfill+age"):
        with (
            override_settings(**policy_settings(policy)),
            mock.patch.object(queue_scan.BackfillQueue, "settle", settle),
        ):
            few = dispatch_cost(gpus=8, queued=100, owner=owner, teams=2, repeats=1)
            short = read[-1]
            many = dispatch_cost(gpus=8, queued=1000, owner=owner, teams=2, repeats=1)
            long = read[-1]
        assert short == long == (queue_scan.FIRST_CHUNK, True)
        assert many["steady_queries"] == few["steady_queries"]
    assert read[0][0] < 100  # the first pass too stops once the cluster is full: 8 of 32 start, the rest cannot


def test_tasks_record_their_nodes_declared_timeout(owner):
    jobs = [Job(1, 0, "a", 1, 1, 0, 90), Job(2, 0, "a", 1, 1, 0, 3600)]
    replay_portal(Trace(jobs, {"a": None}), SimCluster(nodes=1, gpus_per_node=4), owner, policy="backfill")
    assert sorted(TaskRun.objects.values_list("timeout", flat=True)) == [120, 3600]


def test_the_databases_aging_level_is_pythons_at_every_threshold(owner, settings):
    from datetime import timedelta

    from django.utils import timezone

    from apps.jobs.queue_policy import aging_level, effective_priority

    trace = Trace([], {"a": None})
    projects = prepare(trace, owner)
    run = PipelineRun.objects.create(project=projects["a"], created_by=owner, number=1, pipeline_name="p", spec={})
    now = timezone.now()
    for step, top in ((3600, 3), (600, 24), (1, 2), (7, 1), (0, 3), (600, 0)):
        settings.PORTAL_QUEUE_AGING_SECONDS, settings.PORTAL_QUEUE_AGING_MAX = step, top
        waits = [timedelta(seconds=-5), timedelta(0), timedelta(microseconds=1)]
        for k in range(0, max(top, 0) + 3):
            edge = timedelta(seconds=k * max(step, 1))
            waits += [edge - timedelta(microseconds=1), edge, edge + timedelta(microseconds=1)]
        TaskRun.objects.all().delete()
        TaskRun.objects.bulk_create(
            [TaskRun(run=run, node="n", attempt=i + 1, created_at=now - wait) for i, wait in enumerate(waits)]
        )
        for task in TaskRun.objects.annotate(level=aging_level(now)):
            waited = (now - task.created_at).total_seconds()
            assert task.level == effective_priority(0, waited), (step, top, now - task.created_at)
