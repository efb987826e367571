"""The queue's backfill policy (apps/jobs/queue_policy.py) deciding through the real dispatcher on the simulated
cluster (apps/jobs/simulation.py): a reservation for the head task, aging and fair share among projects. Each job
declares its duration, rounded up to a minute, as its timeout; times are the replay's virtual seconds."""

from __future__ import annotations

import pytest

from apps.jobs.models import TaskRun
from apps.jobs.simulation import replay_portal
from apps.runtime.simulated.cluster import SimCluster
from apps.runtime.simulated.traces import Job, Trace
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner(settings, tmp_path):
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    settings.PORTAL_QUEUE_AGING_SECONDS = 0  # each test below that wants aging says so
    return UserFactory(username="sim")


def one_node(trace: Trace, owner, policy: str = "backfill") -> dict[int, float]:
    outcome, _ = replay_portal(trace, SimCluster(nodes=1, gpus_per_node=8), owner, policy=policy)
    return outcome.started


def test_a_task_that_would_delay_the_head_waits_and_one_that_ends_before_its_reservation_starts(owner):
    # Job 1 holds 4 of 8 GPUs until 120 (its timeout). Job 2 (8 GPUs) cannot start: it holds the reservation for 120.
    # Job 4 (1 GPU, declared 60 s) ends before that and starts at once; job 3 (1 GPU, 240 s) would delay job 2: it
    # waits.
    jobs = [
        Job(1, 0, "a", 4, 1, 0, 120),
        Job(2, 1, "a", 8, 1, 0, 60),
        Job(3, 2, "a", 1, 1, 0, 240),
        Job(4, 3, "a", 1, 1, 0, 60),
    ]
    trace = Trace(jobs, {"a": None})
    assert one_node(trace, owner) == {1: 0, 2: 120, 3: 180, 4: 3}
    assert one_node(trace, owner, policy="greedy") == {1: 0, 2: 242, 3: 2, 4: 3}


def test_a_waiting_task_says_the_room_is_reserved_for_the_head(owner):
    jobs = [Job(1, 0, "a", 4, 1, 0, 120), Job(2, 1, "a", 8, 1, 0, 60), Job(3, 2, "a", 1, 1, 0, 240)]
    seen = {}
    cluster = SimCluster(nodes=1, gpus_per_node=8)

    def look(c: SimCluster) -> None:
        if c.now == 0 and len(c.workloads) == 1:
            return
        task = TaskRun.objects.filter(run__pipeline_name="sim", run__number=3).first()
        if task is not None and task.waiting_reason:
            seen.setdefault("reason", task.waiting_reason)

    cluster.on_change = look
    replay_portal(Trace(jobs, {"a": None}), cluster, owner)
    assert seen["reason"] == "waiting for its turn — room is reserved for run a #2, ahead in the queue"


def test_a_task_that_fits_beside_the_reservation_starts_although_it_runs_past_it(owner):
    # Job 2 needs 6 GPUs at 120: 2 are left beside it then, so job 3 (2 GPUs, long) does not delay it.
    jobs = [Job(1, 0, "a", 4, 1, 0, 120), Job(2, 1, "a", 6, 1, 0, 60), Job(3, 2, "a", 2, 1, 0, 600)]
    assert one_node(Trace(jobs, {"a": None}), owner) == {1: 0, 2: 120, 3: 2}


def test_a_task_without_timeout_is_expected_to_run_the_default_estimate(owner, settings):
    # The head's reservation is at job 1's declared end; a job that declares nothing may only use what is left there.
    settings.PORTAL_QUEUE_DEFAULT_ESTIMATE = 3600
    from apps.jobs import queue_policy

    backfill = queue_policy.Backfill(now=_at(0), running={})
    backfill.started(["simulated"], _gpus(4), None)
    reservation = backfill.reserve("simulated", object(), _gpus(8), _gpus(4))
    assert reservation.at == _at(3600)
    assert backfill.blocker(["simulated"], _gpus(1), 3599) is None
    assert backfill.blocker(["simulated"], _gpus(1), None) is reservation


def test_aging_lets_a_long_waiting_task_pass_newer_higher_priority_ones(owner, settings):
    # Job 1 holds the node until 1200. Job 2 (priority 0) has waited ~20 min by then; job 3 (priority 1) 4 min.
    jobs = [Job(1, 0, "a", 8, 1, 0, 1200), Job(2, 1, "a", 8, 1, 0, 60), Job(3, 960, "a", 8, 1, 0, 60, priority=1)]
    trace = Trace(jobs, {"a": None})
    assert one_node(trace, owner)[3] == 1200  # no aging: priority first
    settings.PORTAL_QUEUE_AGING_SECONDS, settings.PORTAL_QUEUE_AGING_MAX = 300, 2
    started = one_node(trace, owner)
    assert started[2] == 1200  # 0 + 2 levels (bounded) > 1 + 0
    assert started[3] == 1260


def test_aging_is_bounded(owner, settings):
    settings.PORTAL_QUEUE_AGING_SECONDS, settings.PORTAL_QUEUE_AGING_MAX = 60, 1
    from apps.jobs.queue_policy import effective_priority

    assert effective_priority(0, 59) == 0
    assert effective_priority(0, 60) == 1
    assert effective_priority(0, 10_000) == 1
    assert effective_priority(5, 10_000) == 6


def test_among_equal_priorities_the_project_holding_less_of_its_quota_goes_first(owner):
    # a holds half of its quota (job 1, long). When job 2 (b) ends, job 3 (a, older) and job 4 (b) both want its
    # 4 GPUs: b holds none of its quota, so job 4 goes first; by age alone (greedy) job 3 would.
    jobs = [
        Job(1, 0, "a", 4, 1, 0, 1200),
        Job(2, 0, "b", 4, 1, 0, 120),
        Job(3, 1, "a", 4, 1, 0, 60),
        Job(4, 2, "b", 4, 1, 0, 60),
    ]
    trace = Trace(jobs, {"a": 8, "b": 8})
    fair = one_node(trace, owner)
    assert (fair[4], fair[3]) == (120, 180)
    greedy = one_node(trace, owner, policy="greedy")
    assert (greedy[3], greedy[4]) == (120, 180)


def test_without_fair_share_the_older_task_goes_first_among_equal_priorities(owner):
    # The trace of the test above: b holds none of its quota, but job 3 (a) is older than job 4 (b). ("+age" is
    # PORTAL_QUEUE_FAIR_SHARE = False.)
    jobs = [
        Job(1, 0, "a", 4, 1, 0, 1200),
        Job(2, 0, "b", 4, 1, 0, 120),
        Job(3, 1, "a", 4, 1, 0, 60),
        Job(4, 2, "b", 4, 1, 0, 60),
    ]
    started = one_node(Trace(jobs, {"a": 8, "b": 8}), owner, policy="backfill+age")
    assert (started[3], started[4]) == (120, 180)


def test_a_replays_policy_names_its_settings():
    from apps.jobs.simulation import policy_settings

    assert policy_settings("backfill+age+borrow") == {
        "PORTAL_QUEUE_POLICY": "backfill",
        "PORTAL_QUEUE_BORROWING": True,
        "PORTAL_QUEUE_FAIR_SHARE": False,
    }
    assert policy_settings("greedy")["PORTAL_QUEUE_FAIR_SHARE"] is True
    with pytest.raises(ValueError, match="unknown policy 'backfill\\+fast'"):
        policy_settings("backfill+fast")


def test_the_queue_stays_greedy_unless_backfill_is_chosen(settings):
    from apps.jobs.queue_policy import current

    assert current() == "greedy"
    settings.PORTAL_QUEUE_POLICY = "backfill"
    assert current() == "backfill"
    settings.PORTAL_QUEUE_POLICY = "fastest"
    assert current() == "greedy"


def _at(seconds: float):
    from datetime import timedelta

    from apps.jobs.simulation import EPOCH

    return EPOCH + timedelta(seconds=seconds)


def _gpus(n: int):
    from portal.lib.resources import Resources

    return Resources.of(0, 0, n)
