"""Warnings raised from a task's samples (apps/jobs/usage_warnings.py): GPU utilisation low for five minutes on end,
memory past 90 % of the limit; once per kind and replica."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from apps.jobs.usage_warnings import LOW_GPU, MEMORY_NEAR, UsageWatch

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
MiB = 2**20


def feed(watch: UsageWatch, seconds: int, replica="0", rss=MiB, gpu=5.0, start=0) -> list[dict]:
    found = []
    for s in range(start, start + seconds + 1):
        found += watch.observe(replica, T0 + timedelta(seconds=s), rss, gpu)
    return found


def test_gpu_utilisation_under_20_percent_for_five_minutes_raises_one_warning():
    watch = UsageWatch()
    assert feed(watch, 299) == []  # 4 min 59 s: not yet
    found = feed(watch, 10, start=300)
    assert [(w["kind"], w["replica"]) for w in found] == [(LOW_GPU, "0")]
    assert found[0]["reason"] == "GPU utilisation of the task stayed under 20% for 5 minutes"
    assert found[0]["at"] == (T0 + timedelta(seconds=300)).isoformat()


def test_a_busy_moment_restarts_the_five_minutes_and_no_gpu_never_warns():
    watch = UsageWatch()
    feed(watch, 200)
    assert watch.observe("0", T0 + timedelta(seconds=201), MiB, 95.0) == []
    assert feed(watch, 250, start=202) == []  # low again since 202 s: under five minutes
    assert feed(UsageWatch(), 600, gpu=None) == []


def test_memory_past_90_percent_of_the_limit_warns_per_replica():
    watch = UsageWatch(memory_limit=1024 * MiB)
    assert feed(watch, 5, replica="worker-0", rss=921 * MiB, gpu=None) == []  # under 90 %
    found = feed(watch, 5, replica="worker-1", rss=950 * MiB, gpu=None)
    assert [(w["kind"], w["replica"]) for w in found] == [(MEMORY_NEAR, "worker-1")]
    assert found[0]["reason"] == "Replica worker-1 used 950 MiB of its 1 GiB memory limit (over 90%)"
    assert UsageWatch().observe("0", T0, 10**12, None) == []  # no limit, no warning
