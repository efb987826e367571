"""Live totals measured from the tasks' latest samples: on the capacity page and its API twin
(/api/v1/clusters/capacity/), and on a project's overview with its API twin (/api/v1/task-runs/usage/?project=),
against the machine's capacity and the project's quota. Samples are written as the agent stores them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from apps.jobs.models import ResourceSample, RunStatus, TaskStatus
from apps.projects.models import Quota
from tests.conftest import user_client
from tests.factories import UserFactory
from tests.projects.factories import PipelineRunFactory, TaskRunFactory, agent, task_workload

GiB, MiB = 2**30, 2**20


def meter(html: str, label: str, nth: int = 0) -> str:
    """The words of the page's `nth` meter of that label ("5 / 32"), whitespace collapsed."""
    start = -1
    for _ in range(nth + 1):
        start = html.index(f'data-meter="{label}"', start + 1)
    text = html[start : html.index("</li>", start)]
    inner = text[text.index('<span class="text-nowrap">') + len('<span class="text-nowrap">') :]
    return " ".join(inner[: inner.index("</span>")].split())


def samples(task, replica: str, cpu: float, rss: int, gpu=None, gpu_memory=None, ages=(12, 2)) -> None:
    """Two samples, `ages` seconds old; the latest (last age) is what counts now, at cpu/rss; older ones at half."""
    now = timezone.now()
    ResourceSample.objects.bulk_create(
        ResourceSample(
            task=task,
            replica=replica,
            ts=now - timedelta(seconds=age),
            cpu_percent=cpu if i == len(ages) - 1 else cpu / 2,
            rss_bytes=rss,
            gpu_percent=gpu,
            gpu_memory_bytes=gpu_memory,
        )
        for i, age in enumerate(ages)
    )


@pytest.fixture
def live(world):
    """A 2-GPU machine: project A's distributed task (two replicas on GPUs) and a CPU task; project B's task."""
    machine = agent(hostname="gpu-box", cpu=32, memory_bytes=128 * GiB, gpus=2)
    run = PipelineRunFactory(project=world.project_a, created_by=world.alice, status=RunStatus.RUNNING)
    ddp = TaskRunFactory(run=run, node="ddp", status=TaskStatus.RUNNING)
    task_workload(ddp, on=machine, cpu=4, memory=16 * GiB, gpu=1, replicas={"master": 1, "worker": 1})
    samples(ddp, "master-0", 150.0, 3 * GiB, gpu=80.0, gpu_memory=20 * GiB)
    samples(ddp, "worker-0", 50.0, 1 * GiB, gpu=40.0, gpu_memory=10 * GiB)
    prep = TaskRunFactory(run=run, node="prep", status=TaskStatus.RUNNING)
    task_workload(prep, on=machine, cpu=1, memory=GiB, gpu=0)
    samples(prep, "0", 100.0, 512 * MiB)
    stale = TaskRunFactory(run=run, node="stale", status=TaskStatus.RUNNING)
    task_workload(stale, on=machine, cpu=1, memory=GiB, gpu=0)
    samples(stale, "0", 100.0, GiB, ages=(120, 60))  # no sample for a minute: uses nothing now
    theirs = PipelineRunFactory(project=world.project_b, created_by=world.charlie, status=RunStatus.RUNNING)
    other = TaskRunFactory(run=theirs, node="hidden", status=TaskStatus.RUNNING)
    task_workload(other, on=machine, cpu=2, memory=2 * GiB, gpu=0)
    samples(other, "0", 200.0, 2 * GiB)
    return machine, ddp, prep


def test_the_capacity_api_sums_every_tasks_latest_samples_per_machine(world, live):
    body = user_client(world.bob).get("/api/v1/clusters/capacity/").json()
    (machine,) = body["machines"]
    assert machine["capacity"] == {"cpu": 32.0, "memory_bytes": 128 * GiB, "gpu": 2.0, "gpu_memory_bytes": 160 * GiB}
    # 1.5 + 0.5 + 1.0 (prep) + 2.0 (project B's, counted in the machine's total, not listed) cores.
    assert machine["measured"] == {
        "cpu": 5.0,
        "memory_bytes": 3 * GiB + GiB + 512 * MiB + 2 * GiB,
        "gpu_percent": 60.0,  # the mean over the replicas on GPUs
        "gpu_memory_bytes": 30 * GiB,
        "replicas": 4,
    }
    listed = {h["what"].split(" · ")[-1]: h["measured"] for h in machine["holders"]}
    assert "hidden" not in listed  # another project's task is a total only
    assert (listed["ddp"]["cpu"], listed["ddp"]["replicas"]) == (2.0, 2)
    assert listed["prep"] == {
        "cpu": 1.0,
        "memory_bytes": 512 * MiB,
        "gpu_percent": None,
        "gpu_memory_bytes": None,
        "replicas": 1,
    }
    assert listed["stale"]["replicas"] == 0


def test_the_capacity_page_shows_the_live_totals_and_each_tasks_use_now(world, live):
    client = Client()
    client.force_login(world.alice)
    html = client.get("/capacity/").content.decode()
    assert "In use now, measured" in html
    assert 'data-meter="CPU cores in use"' in html
    assert meter(html, "CPU cores in use") == "5 / 32"  # cores in use / the machine's
    assert meter(html, "GPU utilisation (mean, %)") == "60 / 100"
    row = html[html.index("ddp</a>") : html.index("</tr>", html.index("ddp</a>"))]
    assert "2 cores · 4.0\xa0GB · GPU 60% · 30.0\xa0GB" in row  # the ddp task, both replicas


def test_a_projects_usage_api_gives_its_tasks_use_now_and_per_minute_against_its_quota(world, live):
    Quota.objects.filter(project=world.project_a).update(cpu_cores=8, memory_bytes=32 * GiB, gpus=2)
    body = user_client(world.bob).get("/api/v1/task-runs/usage/?project=" + world.project_a.slug).json()
    assert body["project"] == world.project_a.slug
    assert body["quota"] == {"cpu": 8.0, "memory_bytes": 32 * GiB, "gpu": 2.0}
    assert body["now"]["cpu"] == 3.0
    assert body["now"]["memory_bytes"] == 4 * GiB + 512 * MiB
    assert sorted((t["node"], t["now"]["replicas"]) for t in body["tasks"]) == [("ddp", 2), ("prep", 1), ("stale", 0)]
    assert body["recent"]  # the last hour, a point a minute
    assert all(set(p) >= {"t", "cpu", "memory_bytes", "gpu_percent", "gpu_memory_bytes"} for p in body["recent"])
    assert max(p["memory_bytes"] for p in body["recent"]) >= 4 * GiB


def test_a_projects_usage_needs_a_visible_project(world, live):
    assert user_client(world.charlie).get("/api/v1/task-runs/usage/?project=" + world.project_a.slug).status_code == 404
    assert user_client(world.alice).get("/api/v1/task-runs/usage/?project=nope").status_code == 404
    response = user_client(world.alice).get("/api/v1/task-runs/usage/")
    assert response.status_code == 400
    assert response.json() == {"project": ["Name the project (its slug)."]}


def test_the_overview_shows_the_tasks_use_now_and_the_last_hours_peak_against_the_quota(world, live):
    Quota.objects.filter(project=world.project_a).update(cpu_cores=8)
    client = Client()
    client.force_login(world.bob)
    html = client.get(f"/p/{world.project_a.slug}/").content.decode()
    assert "Tasks&#x27; use now, measured / quota" in html or "Tasks' use now, measured / quota" in html
    assert meter(html, "CPU cores in use") == "3 / 8"
    assert 'data-meter="GPU utilisation (mean, %)"' in html
    assert 'data-meter="CPU cores, peak minute"' in html


def test_a_machine_without_samples_reads_zero_not_an_error(world):
    agent(hostname="idle", cpu=4, memory_bytes=8 * GiB)
    body = user_client(UserFactory(username="dora")).get("/api/v1/clusters/capacity/").json()
    assert body["machines"][0]["measured"]["cpu"] == 0.0
    assert body["machines"][0]["measured"]["gpu_percent"] is None
