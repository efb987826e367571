"""/api/v1/runs/<id>/usage/: CPU % and resident memory of each task attempt over time, downsampled on the server for
the run page's chart. The samples are written directly, as the agent stores them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.jobs.models import PipelineRun, ResourceSample, RunStatus, TaskRun
from apps.projects.models import Role
from tests.access import make_run
from tests.conftest import user_client
from tests.factories import UserFactory, add_member

START = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
START_MS = int(START.timestamp() * 1000)


def url(run: PipelineRun | int, query: str = "") -> str:
    pk = run if isinstance(run, int) else run.pk
    return f"/api/v1/runs/{pk}/usage/" + (f"?{query}" if query else "")


def sample(task: TaskRun, count: int, cpu=lambda i: 50.0, rss=lambda i: 100 * 2**20) -> None:
    """`count` samples one second apart from START."""
    ResourceSample.objects.bulk_create(
        ResourceSample(task=task, ts=START + timedelta(seconds=i), cpu_percent=cpu(i), rss_bytes=rss(i))
        for i in range(count)
    )


@pytest.fixture
def run(world) -> PipelineRun:
    return make_run(world.project_a, world.alice)


def test_each_task_attempt_has_its_cpu_and_memory_series_in_time_order(world, run):
    fit_1 = TaskRun.objects.create(run=run, node="fit", attempt=1, status="failed")
    fit_2 = TaskRun.objects.create(run=run, node="fit", attempt=2, status="running")
    prep = TaskRun.objects.create(run=run, node="prep", attempt=1, status="succeeded")
    TaskRun.objects.create(run=run, node="report", attempt=1, status="pending")  # no samples: left out
    sample(prep, 3, cpu=lambda i: 10.0 * i, rss=lambda i: (i + 1) * 2**20)
    sample(fit_2, 2, cpu=lambda i: 180.5)
    sample(fit_1, 1)

    response = user_client(world.bob).get(url(run))

    assert response.status_code == 200
    body = response.json()
    assert (body["run"], body["status"], body["active"], body["points"]) == (run.pk, "queued", True, 300)
    assert [(t["node"], t["attempt"], t["status"], t["total"]) for t in body["tasks"]] == [
        ("fit", 1, "failed", 1),
        ("fit", 2, "running", 2),
        ("prep", 1, "succeeded", 3),
    ]
    assert [t["task"] for t in body["tasks"]] == [fit_1.pk, fit_2.pk, prep.pk]
    prep_series = body["tasks"][2]
    assert prep_series["cpu"] == {"t": [START_MS, START_MS + 1000, START_MS + 2000], "v": [0.0, 10.0, 20.0]}
    assert prep_series["rss"] == {"t": [START_MS, START_MS + 1000, START_MS + 2000], "v": [2**20, 2 * 2**20, 3 * 2**20]}
    assert body["tasks"][1]["cpu"]["v"] == [180.5, 180.5]


def test_a_long_series_is_downsampled_to_the_points_asked_for_keeping_its_ends_and_peaks(world, run):
    task = TaskRun.objects.create(run=run, node="train", status="running")
    sample(task, 5000, cpu=lambda i: 400.0 if i == 2500 else 100.0, rss=lambda i: i * 2**20)

    body = user_client(world.alice).get(url(run, "points=200")).json()

    series = body["tasks"][0]
    assert series["total"] == 5000
    assert len(series["cpu"]["t"]) == len(series["cpu"]["v"]) == 200
    assert len(series["rss"]["t"]) == 200
    assert series["cpu"]["t"][0] == START_MS
    assert series["cpu"]["t"][-1] == START_MS + 4999 * 1000
    assert 400.0 in series["cpu"]["v"]  # a spike survives (LTTB keeps the shape, not an average)
    assert series["cpu"]["t"] == sorted(series["cpu"]["t"])
    # The default stays a few hundred points.
    assert len(user_client(world.alice).get(url(run)).json()["tasks"][0]["cpu"]["t"]) == 300


def test_a_distributed_task_has_a_series_per_replica_with_its_gpu_and_warnings(world, run):
    task = TaskRun.objects.create(
        run=run,
        node="ddp",
        status="running",
        resource_warnings=[
            {"kind": "low_gpu", "replica": "worker-0", "reason": "GPU utilisation of replica worker-0 …", "at": ""}
        ],
    )
    cpu_only = TaskRun.objects.create(run=run, node="prep", status="succeeded")
    ResourceSample.objects.bulk_create(
        ResourceSample(
            task=task,
            replica=replica,
            ts=START + timedelta(seconds=i),
            cpu_percent=cpu,
            rss_bytes=rss,
            gpu_percent=gpu,
            gpu_memory_bytes=gpu_memory,
        )
        for i in range(3)
        for replica, cpu, rss, gpu, gpu_memory in (
            ("master-0", 100.0, 300 * 2**20, 90.0, 8 * 2**30),
            ("worker-0", 50.0, 200 * 2**20, 5.0 * i, 2**30),
        )
    )
    sample(cpu_only, 2)

    body = user_client(world.alice).get(url(run)).json()

    assert [(t["node"], t["replica"], t["total"]) for t in body["tasks"]] == [
        ("ddp", "master-0", 3),
        ("ddp", "worker-0", 3),
        ("prep", "", 2),
    ]
    master, worker, prep = body["tasks"]
    assert master["cpu"]["v"] == [100.0] * 3
    assert master["rss"]["v"] == [300 * 2**20] * 3
    assert master["gpu"] == {"t": [START_MS, START_MS + 1000, START_MS + 2000], "v": [90.0] * 3}
    assert master["gpu_memory"]["v"] == [8 * 2**30] * 3
    assert worker["gpu"]["v"] == [0.0, 5.0, 10.0]
    assert (master["warnings"], [w["kind"] for w in worker["warnings"]]) == ([], ["low_gpu"])
    assert (prep["gpu"], prep["gpu_memory"], prep["warnings"]) == (None, None, [])

    detail = user_client(world.alice).get(f"/api/v1/task-runs/{task.pk}/").json()
    assert [w["replica"] for w in detail["resource_warnings"]] == ["worker-0"]


def test_a_finished_run_is_no_longer_active_and_one_without_samples_has_no_series(world, run):
    PipelineRun.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED)
    TaskRun.objects.create(run=run, node="a", status="succeeded")

    body = user_client(world.alice).get(url(run)).json()

    assert (body["status"], body["active"], body["tasks"]) == ("succeeded", False, [])


def test_a_viewer_may_read_it(world, run):
    viewer = UserFactory(username="vera")
    add_member(world.project_a, viewer, Role.VIEWER)
    assert user_client(viewer).get(url(run)).status_code == 200


@pytest.mark.parametrize("points", ["abc", "2", "2001", "-5", ""])
def test_a_bad_points_value_is_a_400_saying_what_is_allowed(world, run, points):
    response = user_client(world.alice).get(url(run, f"points={points}"))
    assert response.status_code == 400
    assert response.json() == {"points": ["Give a whole number from 3 to 2000."]}


def test_another_projects_run_is_not_found_like_a_missing_one(world, run):
    theirs = make_run(world.project_b, world.charlie)
    sample(TaskRun.objects.create(run=theirs, node="a"), 3)

    assert user_client(world.alice).get(url(theirs)).status_code == 404
    assert user_client(world.alice).get(url(987654)).status_code == 404
    assert user_client(world.charlie).get(url(run)).status_code == 404
    assert user_client(world.charlie).get(url(theirs)).status_code == 200


def test_anonymous_is_refused(api, run):
    assert api.get(url(run)).status_code in (401, 403)


def test_the_queries_do_not_grow_with_the_tasks(world, run):
    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert user_client(world.alice).get(url(run)).status_code == 200
        return len(queries)

    sample(TaskRun.objects.create(run=run, node="t0"), 5)
    one = count()
    for i in range(1, 6):
        sample(TaskRun.objects.create(run=run, node=f"t{i}"), 5)
    assert count() == one
