"""apps.serving.stats: the stored per-minute rows and concurrency samples, summed across web processes."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from apps.serving import stats
from apps.serving.models import RevisionTraffic
from tests.serving.replicas import add_revision, make_service


@pytest.fixture
def revision(world):
    stats.reset()  # a rolled-back test's revision id comes again, and its meter would still hold its counts
    service = make_service(world.project_a)
    return add_revision(service, 1)


def test_concurrency_is_the_average_in_flight_summed_across_processes(revision):
    meter = stats.meter(revision.pk, 1, "project-a", "iris")
    stats.flush_now()
    began = time.monotonic()
    first, second = meter.begin(), meter.begin()
    time.sleep(0.5)
    meter.end(first, 200)
    meter.end(second, 200)
    held = time.monotonic() - began  # 0.5 s, or more on a busy machine: the meter counts what really passed
    stats.flush_now()  # ~1.0 request-second from this process
    now = datetime.now(UTC)
    stats.write(stats.Snapshot(now, [(revision.pk, 2.0)], []), source="other-host:1")  # another web process

    assert stats.concurrency(revision.pk, window_s=10) == pytest.approx((2 * held + 2.0) / 10, abs=0.03)
    assert stats.concurrency(revision.pk + 1000, window_s=10) == 0


def test_series_merges_processes_per_minute_and_estimates_percentiles(revision):
    meter = stats.meter(revision.pk, 1, "project-a", "iris")
    for status in (200, 200, 200, 404, 503):
        meter.end(meter.begin(), status)
    stats.flush_now()
    minute = int(time.time() // 60)
    other = stats._Minute(requests=10, errors=1, client_errors=2)
    other.buckets[stats.BOUNDS_MS.index(20)] = 10  # ten answers between 15 and 20 ms
    stats.write(stats.Snapshot(datetime.now(UTC), [], [(revision.pk, minute, other)]), source="other-host:1")

    points = stats.series(revision.service, minutes=3)[1]

    assert len(points["t"]) == 3
    assert points["t"][-1] == datetime.fromtimestamp(minute * 60, UTC).isoformat()
    assert points["requests"] == [0, 0, 15]
    assert points["errors"] == [0, 0, 2]
    assert points["client_errors"] == [0, 0, 3]
    assert points["p50_ms"][:2] == [None, None]
    assert 15 <= points["p50_ms"][-1] <= 20
    assert 15 <= points["p99_ms"][-1] <= 20
    assert RevisionTraffic.objects.filter(revision=revision).count() == 2


def test_a_minute_row_is_rewritten_not_added_to(revision):
    meter = stats.meter(revision.pk, 1, "project-a", "iris")
    meter.end(meter.begin(), 200)
    stats.flush_now()
    meter.end(meter.begin(), 200)
    stats.flush_now()
    stats.flush_now()  # nothing new: nothing written

    assert sum(RevisionTraffic.objects.filter(revision=revision).values_list("requests", flat=True)) == 2


def test_quantile_interpolates_inside_the_bucket():
    buckets = [0] * (len(stats.BOUNDS_MS) + 1)
    buckets[0] = 50  # ≤ 1 ms
    buckets[1] = 50  # 1–2 ms
    assert stats.quantile(buckets, 0.5) == 1.0
    assert stats.quantile(buckets, 0.75) == 1.5
    assert stats.quantile([0] * len(buckets), 0.5) is None
    buckets[-1] = 1000  # beyond the last bound: reported as the last bound
    assert stats.quantile(buckets, 0.99) == stats.BOUNDS_MS[-1]


def test_the_service_list_counts_requests_per_second_of_every_service_in_one_query(
    revision, world, django_assert_num_queries
):
    from apps.serving.services.metrics import requests_per_second, requests_per_second_by_service

    quiet = make_service(world.project_a, name="quiet")
    minute = int(time.time() // 60)
    for at, requests in ((minute - 1, 120), (minute, 30)):  # the last full minute, and the one under way
        stats.write(
            stats.Snapshot(datetime.now(UTC), [], [(revision.pk, at, stats._Minute(requests=requests))]), source="x:1"
        )
    services = [revision.service, quiet]

    with django_assert_num_queries(1):
        by_service = requests_per_second_by_service(services)

    assert by_service == {revision.service.pk: 2.0, quiet.pk: None}
    assert by_service == {s.pk: requests_per_second(s) for s in services}  # what the service's own page says
