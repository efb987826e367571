"""The Spark UI of a running spark-features task through the portal (apps/jobs/sparkui.py): a real local[1] task
serving its UI on the port the dispatcher gave it, read by a member through the proxy, refused to everyone else,
gone once the task ended. Spark is kept busy by a derivation that sleeps (Java's Thread.sleep through Spark SQL's
`reflect`), and stopped by PID once the checks are done. Skipped, saying why, without Java or pyspark."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.test import AsyncClient, Client
from django.urls import reverse

from apps.jobs import orchestrator, sparkui
from apps.jobs.models import JobTemplate, TaskRun, TaskStatus
from apps.jobs.services import save_pipeline, start_run
from apps.projects.models import Role
from apps.runtime.local.launch import free_port
from apps.runtime.models import Agent, LocalWorkload
from apps.runtime.workload import Workload
from tests.access import make_run
from tests.factories import UserFactory, add_member
from tests.jobs.test_builtin_tasks import task_env

pytestmark = pytest.mark.django_db

ACTIVE = "Active Jobs (1)"
WRITING = "spark-features: write data.csv"  # the description of the job that writes (and here sleeps)
SLEEP = "wait = reflect('java.lang.Thread', 'sleep', CAST(120000 AS BIGINT))"  # one row: Spark busy for 2 minutes


def running_task(world, status: str = TaskStatus.RUNNING, port: int | None = None) -> TaskRun:
    """A task of project A as the dispatcher leaves it on the local runtime, with a Spark UI on `port` if given."""
    run = make_run(world.project_a, world.alice)
    task = TaskRun.objects.create(run=run, node="a", status=status, runtime="local")
    task.handle = f"task-{task.pk}"
    task.save(update_fields=["handle"])
    workload = Workload(uid=task.handle, name="spark", project=world.project_a.slug, command=["{python:train}"])
    if port is not None:
        workload = sparkui.open_ui(task, workload, port)
    LocalWorkload.objects.create(uid=task.handle, spec=workload.as_dict())
    return task


def get(user, path: str, method: str = "get") -> object:
    """`path` through the real ASGI request path (the proxy reads the ASGI scope), as `user` (None: anonymous); the
    streamed body read in the same event loop as the request (the proxy's pooled upstream client belongs to it)."""
    client = AsyncClient()
    if user is not None:
        client.force_login(user)

    async def fetch() -> object:
        response = await getattr(client, method)(path)
        if getattr(response, "streaming", False):
            response.body = b"".join([chunk async for chunk in response.streaming_content])
        else:
            response.body = response.content
        return response

    return async_to_sync(fetch)()


@pytest.fixture
def spark_task(world, spark_python, tmp_path):
    """A real spark-features task, running and serving its UI on the port the portal chose."""
    version = tmp_path / "v1"
    version.mkdir()
    (version / "one.csv").write_text("x\n1\n")
    port = free_port()
    task = running_task(world, port=port)
    env = LocalWorkload.objects.get(uid=task.handle).spec["env"]
    out = tmp_path / "out"
    out.mkdir()
    argv = [spark_python, "-m", "apps.jobs.builtin_tasks.spark_features", "--dataset", str(version),
            "--master", "local[1]", "--derive", SLEEP]  # fmt: skip
    process = subprocess.Popen(  # nosec B603
        argv, cwd=out, env=task_env(out, None, **env), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while True:  # until the job that sleeps is the active one
            assert process.poll() is None, process.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "the Spark UI did not show the running job in 2 minutes"
            try:
                page = httpx.get(f"http://127.0.0.1:{port}/jobs/", timeout=2)
                if page.status_code == 200 and ACTIVE in page.text and WRITING in page.text:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        yield task
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the task and the JVM it started: its own process group
        process.wait(timeout=30)
        process.stderr.close()


def test_a_member_reads_the_running_tasks_spark_ui_and_no_one_else(world, spark_task):
    base = f"/task/{spark_task.pk}/spark"
    viewer = UserFactory(username="viewer")
    add_member(world.project_a, viewer, Role.VIEWER)

    jobs = get(viewer, f"{base}/jobs/")
    assert jobs.status_code == 200, jobs.body[:3000]
    html = jobs.body.decode()
    assert "Spark Jobs" in html
    assert ACTIVE in html, re.findall(r"(?:Active|Completed|Failed) Jobs[^<]*", html)
    assert WRITING in html  # the task's running job, as the task describes it
    assert f'href="{base}/stages/"' in html  # its links stay under the proxy (spark.ui.proxyBase)
    assert f"{base}/static/" in html
    assert get(world.bob, f"{base}/static/bootstrap.bundle.min.js").status_code == 200

    root = get(world.bob, f"{base}/")
    assert (root.status_code, root["Location"]) == (302, f"{base}/jobs/")  # Spark's redirect, kept under the proxy

    assert get(world.charlie, f"{base}/jobs/").status_code == 404  # another project's owner
    assert get(UserFactory(username="nobody"), f"{base}/jobs/").status_code == 404
    anonymous = get(None, f"{base}/jobs/")
    assert anonymous.status_code == 302
    assert anonymous["Location"].startswith(reverse(settings.LOGIN_URL))
    assert get(world.bob, f"{base}/jobs/", method="delete").status_code == 405  # read-only

    # The run's page links to it while the task runs.
    page = Client()
    page.force_login(world.bob)
    detail = reverse("jobs:run-detail", kwargs={"project": world.project_a.slug, "pk": spark_task.run_id})
    assert f'href="{base}/"' in page.get(detail).content.decode()


def test_once_the_task_ended_the_link_goes_and_the_proxy_says_gone(world):
    task = running_task(world, status=TaskStatus.SUCCEEDED, port=free_port())

    response = get(world.bob, f"/task/{task.pk}/spark/jobs/")

    assert response.status_code == 410
    assert "The Spark UI is gone" in response.body.decode()
    assert "The task ended (Succeeded)" in response.body.decode()
    client = Client()
    client.force_login(world.bob)
    detail = reverse("jobs:run-detail", kwargs={"project": world.project_a.slug, "pk": task.run_id})
    assert "data-spark-ui" not in client.get(detail).content.decode()
    assert get(world.charlie, f"/task/{task.pk}/spark/jobs/").status_code == 404


def test_a_queued_task_asks_to_wait_and_a_task_without_spark_ui_is_not_found(world):
    queued = running_task(world, status=TaskStatus.QUEUED)
    plain = running_task(world)  # running, but not a Spark template's task

    waiting = get(world.bob, f"/task/{queued.pk}/spark/")
    assert (waiting.status_code, waiting["Refresh"]) == (503, "3")
    assert get(world.bob, f"/task/{plain.pk}/spark/").status_code == 404


def test_an_unreachable_ui_is_a_502_page(world):
    task = running_task(world, port=free_port())  # nothing listens there

    response = get(world.bob, f"/task/{task.pk}/spark/jobs/")

    assert response.status_code == 502
    assert "The Spark UI is unreachable" in response.body.decode()


def test_the_task_turns_the_ui_on_only_where_the_portal_gave_it_a_port():
    from apps.jobs.builtin_tasks.spark_features import ui_settings

    assert ui_settings({}) == {"spark.ui.enabled": "false"}
    assert ui_settings({"PORTAL_SPARK_UI_PORT": "4050", "PORTAL_SPARK_UI_BASE": "/task/3/spark"}) == {
        "spark.ui.enabled": "true",
        "spark.ui.port": "4050",
        "spark.ui.killEnabled": "false",
        "spark.ui.proxyBase": "/task/3/spark",
    }


def test_path_segments_cannot_climb_out(world):
    task = running_task(world, port=free_port())
    assert get(world.bob, f"/task/{task.pk}/spark/a/%2E%2E/jobs/").status_code == 404


def test_the_dispatcher_gives_a_local_spark_task_a_ui_port_and_no_other_task(world, settings, tmp_path, monkeypatch):
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    monkeypatch.setattr("apps.runtime.local.runtime.ADDRESS_TTL", 3600)
    Agent.objects.create(hostname="test", pid=1, address="127.0.0.1:9", capacity={"cpu": 4, "gpu": 0})
    for slug, framework in (("spark", "spark"), ("plain", "")):
        JobTemplate.objects.create(slug=slug, name=slug, command=["/bin/true"], framework=framework)
    nodes = [{"name": n, "template": n, "cache": False, "resources": {"cpu": 0}} for n in ("spark", "plain")]
    run = start_run(save_pipeline(world.project_a, world.alice, name="p", spec={"nodes": nodes}), world.alice)
    orchestrator.advance_run(run.pk)

    spark, plain = (run.tasks.get(node=n) for n in ("spark", "plain"))
    workload = Workload.from_dict(LocalWorkload.objects.get(uid=spark.handle).spec)
    port = workload.ports["spark-ui"]  # forwarded into the sandbox like a notebook's port
    assert workload.env["PORTAL_SPARK_UI_PORT"] == str(port)
    assert workload.env["PORTAL_SPARK_UI_BASE"] == f"/task/{spark.pk}/spark"
    other = Workload.from_dict(LocalWorkload.objects.get(uid=plain.handle).spec)
    assert other.ports == {}
    assert "PORTAL_SPARK_UI_PORT" not in other.env
