"""The home page and a project's overview: what they count (runs today, success rate, CPU- and GPU-hours, storage
and resources against the quota), what they list (my runs with their progress, my notebooks, my projects'
services, the queue with its waiting reasons), their empty states, whose rows they show, and that their queries do
not grow with the number of runs."""

from __future__ import annotations

import json
from datetime import datetime, time, timedelta

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.console import dashboards
from apps.jobs import rollups
from apps.jobs.models import RunSlotDelta, RunStatus, TaskStatus, TaskUsageSlotDelta
from apps.notebooks.models import Notebook
from apps.serving.models import InferenceService
from tests.factories import ProjectFactory, dataset, dataset_version
from tests.projects.factories import (
    NotebookFactory,
    PipelineRunFactory,
    ServiceFactory,
    TaskRunFactory,
    agent,
    notebook_workload,
    replica,
    replica_workload,
    task_workload,
)

HTMX = {"HTTP_HX_REQUEST": "true"}


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def html_of(response) -> str:
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def stat(html: str, key: str) -> str:
    """The value shown in a summary tile."""
    start = html.index(f'data-stat="{key}"')
    value = html.index("data-value>", start) + len("data-value>")
    return html[value : html.index("</div>", value)].strip()


# --- Home ------------------------------------------------------------------------------------------------


def test_home_lists_my_active_and_recent_runs_with_their_progress(world):
    a = world.project_a
    running = PipelineRunFactory(project=a, created_by=world.bob, status=RunStatus.RUNNING, pipeline_name="train")
    TaskRunFactory(run=running, node="prepare", status=TaskStatus.SUCCEEDED)
    TaskRunFactory(run=running, node="train", status=TaskStatus.FAILED)  # attempt 1 ended: the node counts as done
    TaskRunFactory(run=running, node="train", attempt=2, status=TaskStatus.RUNNING)
    done = PipelineRunFactory(project=a, created_by=world.bob, status=RunStatus.FAILED, pipeline_name="etl")
    PipelineRunFactory(project=a, created_by=world.alice, status=RunStatus.RUNNING, pipeline_name="alices")

    response = client_for(world.bob).get("/")

    html = html_of(response)
    home = response.context["home"]
    assert [(r.pipeline_name, r.done_count) for r in home.active_runs] == [("train", 2)]
    assert [r.pipeline_name for r in home.recent_runs] == ["etl"]
    assert stat(html, "active-runs") == "1"
    assert f'data-run="{running.pk}" data-live-run data-ws="/ws/runs/{running.pk}/logs/"' in html
    assert f'data-run="{done.pk}">' in html  # a finished run is not followed
    assert 'aria-valuemax="3" aria-valuenow="2"' in html
    assert 'style="width: 67%"></div>' in html
    assert "data-progress-text>2/3<" in html
    assert "alices" not in html  # the home page shows my runs; the project's overview shows everyone's
    assert 'id="run-status-labels"' in html
    assert "js/dashboards.js" in html


def test_home_counts_active_runs_beyond_the_rows_it_shows(world):
    for _ in range(dashboards.ROWS + 2):
        PipelineRunFactory(project=world.project_a, created_by=world.alice, status=RunStatus.QUEUED)

    response = client_for(world.alice).get("/")

    assert len(response.context["home"].active_runs) == dashboards.ROWS
    assert stat(html_of(response), "active-runs") == str(dashboards.ROWS + 2)


def test_home_shows_my_notebooks_and_my_projects_services_only(world):
    a, b = world.project_a, world.project_b
    mine = NotebookFactory(project=a, owner=world.bob, name="eda", status=Notebook.Status.RUNNING)
    NotebookFactory(project=a, owner=world.alice, name="alices-notebook")
    NotebookFactory(project=b, owner=world.charlie, name="charlies-notebook")
    ServiceFactory(project=a, name="iris-api", status=InferenceService.Status.READY)
    ServiceFactory(project=a, name="old-api", status=InferenceService.Status.STOPPED)
    ServiceFactory(project=b, name="secret-api")

    response = client_for(world.bob).get("/")

    html = html_of(response)
    assert [nb.name for nb in response.context["notebooks"]] == ["eda"]
    assert [s.name for s in response.context["services"]] == ["iris-api", "old-api"]  # stopped ones last
    assert f'href="/p/project-a/notebooks/{mine.pk}/"' in html
    assert "iris-api" in html
    assert "old-api" in html
    assert "alices-notebook" not in html
    assert "charlies-notebook" not in html
    assert "secret-api" not in html
    assert "Project B" not in html
    assert stat(html, "notebooks") == "1"
    assert stat(html, "services") == "1"  # ready, of 2
    assert "every 3s" not in html  # no polling: the sections follow the projects' events


def test_home_follows_the_events_of_the_projects_it_shows_and_redraws_from_its_fragment(world):
    NotebookFactory(project=world.project_a, owner=world.bob, name="eda", status=Notebook.Status.STARTING)
    bob = client_for(world.bob)

    html = html_of(bob.get("/"))
    assert '<span hidden data-project-events="/ws/projects/project-a/events/"></span>' in html
    assert "/ws/projects/project-b/" not in html  # nothing of B is shown (bob is no member)
    assert 'id="home-notebooks-section" data-live="notebook" data-live-url="/"' in html
    assert 'id="home-services-section" data-live="service" data-live-url="/"' in html
    assert "starting up…" in html

    Notebook.objects.filter(name="eda").update(status=Notebook.Status.RUNNING)
    partial = bob.get("/", **HTMX)
    section = html_of(partial)
    assert next(t.name for t in partial.templates) == "console/partials/home_workspaces.html"
    assert section.startswith('<div id="home-workspaces">')
    assert 'data-status="running"' in section
    assert "<html" not in section


def test_home_shows_an_empty_state_per_section(world):
    html = html_of(client_for(world.charlie).get("/"))
    for message in (
        "None of your runs is running or queued.",
        "You have not run a pipeline yet.",
        "You have no notebooks.",
        "No inference services in your projects yet.",
    ):
        assert message in html
    assert html.count("data-empty") == 4


def test_home_counts_active_runs_per_project_in_the_project_table(world):
    PipelineRunFactory(project=world.project_a, created_by=world.alice, status=RunStatus.RUNNING)
    PipelineRunFactory(project=world.project_a, created_by=world.alice, status=RunStatus.SUCCEEDED)
    PipelineRunFactory(project=world.project_b, created_by=world.charlie, status=RunStatus.RUNNING)

    response = client_for(world.bob).get("/")

    rows = [(m.project.slug, m.member_count, m.active_runs) for m in response.context["memberships"]]
    assert rows == [("project-a", 2, 1)]


def test_home_queries_do_not_grow_with_runs_notebooks_or_services(world, django_assert_max_num_queries):
    bob = client_for(world.bob)
    bob.get("/")

    for i in range(40):
        status = RunStatus.RUNNING if i % 2 else RunStatus.SUCCEEDED
        run = PipelineRunFactory(project=world.project_a, created_by=world.bob, status=status)
        TaskRunFactory(run=run, node="prepare")
        NotebookFactory(project=world.project_a, owner=world.bob)
        ServiceFactory(project=world.project_a)
        extra = ProjectFactory(owner=world.bob, slug=f"extra-{i}")
        PipelineRunFactory(project=extra, created_by=world.bob, status=RunStatus.RUNNING)

    # session + user, guardian, memberships, 2 run lists, active count, notebooks and services (rows + counts)
    with django_assert_max_num_queries(12):
        response = bob.get("/")
    assert len(response.context["home"].active_runs) == dashboards.ROWS
    assert len(response.context["memberships"]) == 41


# --- Project overview ---------------------------------------------------------------------------------------


@pytest.fixture
def dataset_store(settings, tmp_path):
    settings.STORAGES = {
        **django_settings.STORAGES,
        "datasets": {"BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": tmp_path}},
    }
    settings.DATASETS_UPLOAD_DIR = tmp_path / "uploads"
    return tmp_path


def overview(user, slug: str = "project-a"):
    return client_for(user).get(f"/p/{slug}/")


def test_overview_counts_runs_today_and_the_success_rate(world):
    a = world.project_a
    yesterday = timezone.now() - timedelta(days=1)
    for status in (RunStatus.SUCCEEDED, RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED):
        PipelineRunFactory(project=a, status=status)
    PipelineRunFactory(project=a, status=RunStatus.SUCCEEDED, created_at=yesterday)
    PipelineRunFactory(project=a, status=RunStatus.FAILED, created_at=timezone.now() - timedelta(days=45))
    PipelineRunFactory(project=world.project_b, status=RunStatus.FAILED)  # another project's

    response = overview(world.bob)

    html = html_of(response)
    stats = response.context["stats"]
    assert (stats.runs_today, stats.succeeded, stats.failed, stats.success_rate) == (4, 3, 1, 75)
    assert stat(html, "runs-today") == "4"
    assert stat(html, "success-rate") == "75 %"
    assert "3 of 4 ended runs" in html  # the cancelled run is neither, the 45-day-old one is outside the window


def test_overview_sums_cpu_and_gpu_hours_from_task_usage(world):
    a = world.project_a
    run = PipelineRunFactory(project=a)
    TaskRunFactory(run=run, node="prepare", usage={"cpu_seconds": 3600, "wall_seconds": 1800}, resources={"cpu": 2})
    TaskRunFactory(
        run=run, node="train", usage={"cpu_seconds": 1800, "wall_seconds": 5400}, resources={"cpu": 1, "gpu": 2}
    )
    TaskRunFactory(run=run, node="evaluate", status=TaskStatus.CACHED)  # no usage: counts nothing
    old = timezone.now() - timedelta(days=40)
    TaskRunFactory(run=run, node="old", usage={"cpu_seconds": 36000}, finished_at=old)
    other = PipelineRunFactory(project=world.project_b)
    TaskRunFactory(run=other, usage={"cpu_seconds": 7200, "wall_seconds": 7200}, resources={"gpu": 8})

    response = overview(world.bob)

    html = html_of(response)
    stats = response.context["stats"]
    assert (round(stats.cpu_hours, 3), round(stats.gpu_hours, 3)) == (1.5, 3.0)
    assert stat(html, "cpu-hours") == "1.5"
    assert stat(html, "gpu-hours") == "3.0"
    chart = json.loads(html.split('id="overview-chart" type="application/json">')[1].split("</script>")[0])
    assert len(chart["days"]) == dashboards.WINDOW_DAYS
    assert chart["days"][-1] == timezone.localdate().isoformat()
    assert chart["hours"][0]["data"][-1] == 1.5
    assert chart["hours"][1]["data"][-1] == 3.0
    assert chart["runs"][0]["data"][-1] == 1  # succeeded today
    assert "vendor/echarts/echarts.min.js" in html


# UTC-5 in December: a UTC day would move both rows; India and Nepal: days that start on the half and the three
# quarters of a UTC hour (the roll-ups the page reads count quarter hours)
@pytest.mark.parametrize("zone", ["America/New_York", "Asia/Kolkata", "Asia/Kathmandu"])
def test_overview_puts_runs_and_usage_on_the_local_day_they_happened(world, settings, zone):
    settings.TIME_ZONE = zone
    midnight = timezone.make_aware(datetime.combine(timezone.localdate(), time.min))
    for at in (midnight - timedelta(seconds=1), midnight):  # the last second of yesterday, the first of today
        run = PipelineRunFactory(project=world.project_a, status=RunStatus.SUCCEEDED, created_at=at)
        TaskRunFactory(run=run, usage={"cpu_seconds": 3600}, finished_at=at)

    response = overview(world.bob)

    chart = response.context["stats"].chart
    assert response.context["stats"].runs_today == 1
    assert chart["runs"][0]["data"][-2:] == [1, 1]
    assert chart["hours"][0]["data"][-2:] == [1.0, 1.0]


def test_overview_shows_storage_used_against_the_quota(world, dataset_store):
    a = world.project_a
    a.quota.storage_bytes = 1000
    a.quota.save()
    dataset_version(dataset(a, world.alice), {"a.bin": b"x" * 300, "b.bin": b"y" * 100})
    dataset_version(dataset(world.project_b, world.charlie, name="theirs"), {"c.bin": b"z" * 900})

    response = overview(world.bob)

    html = html_of(response)
    assert response.context["stats"].storage_used == 400
    assert stat(html, "storage") == "400\xa0bytes"
    assert "40 % of 1000\xa0bytes" in html
    storage = next(m for m in response.context["stats"].meters if m.label == "Storage")
    assert (storage.used, storage.limit, storage.percent) == (400, 1000, 40)


def test_the_storage_meter_counts_tracking_artifacts_too(world, dataset_store):
    from apps.models.models import ArtifactFile

    a = world.project_a
    a.quota.storage_bytes = 1000
    a.quota.save()
    dataset_version(dataset(a, world.alice), {"a.bin": b"x" * 300})
    ArtifactFile.objects.create(project=a, path="1/run/artifacts/model.bin", size=200)
    ArtifactFile.objects.create(project=world.project_b, path="2/run/artifacts/model.bin", size=900)

    response = overview(world.bob)

    storage = next(m for m in response.context["stats"].meters if m.label == "Storage")
    assert (storage.used, storage.limit, storage.percent) == (500, 1000, 50)


def test_overview_lists_the_queue_with_waiting_reasons(world):
    a = world.project_a
    run = PipelineRunFactory(project=a, status=RunStatus.RUNNING, pipeline_name="train", number=12)
    TaskRunFactory(run=run, node="prepare", status=TaskStatus.SUCCEEDED)
    TaskRunFactory(run=run, node="train", status=TaskStatus.WAITING, waiting_reason="waiting for 2 GPUs, quota 4/4")
    TaskRunFactory(run=run, node="evaluate", status=TaskStatus.QUEUED)
    finished = PipelineRunFactory(project=a, status=RunStatus.CANCELLED)
    TaskRunFactory(run=finished, node="stale", status=TaskStatus.WAITING, waiting_reason="left behind")

    response = overview(world.bob)

    html = html_of(response)
    stats = response.context["stats"]
    assert [(t.node, t.status) for t in stats.queue] == [("train", "waiting"), ("evaluate", "queued")]
    assert stats.queue_count == 2
    assert "waiting for 2 GPUs, quota 4/4" in html
    assert "handed to the runtime, starting" in html
    assert "left behind" not in html
    assert f'href="/p/project-a/runs/{run.pk}/"' in html
    assert [(r.pk, r.done_count) for r in stats.active_runs] == [(run.pk, 1)]
    assert ">1/3<" in html
    assert f'data-live-run data-ws="/ws/runs/{run.pk}/logs/"' in html


def test_overview_shows_what_the_project_holds_against_its_quota(world):
    a = world.project_a
    a.quota.cpu_cores, a.quota.gpus, a.quota.memory_bytes, a.quota.concurrent_runs = 8, 2, 16 * 2**30, 2
    a.quota.concurrent_tasks = 4
    a.quota.save()
    machine = agent()
    run = PipelineRunFactory(project=a, status=RunStatus.RUNNING, created_by=world.alice)
    task_workload(TaskRunFactory(run=run, status=TaskStatus.RUNNING), on=machine, cpu=2, memory=4 * 2**30)
    nb = NotebookFactory(project=a, owner=world.bob, name="eda", status=Notebook.Status.RUNNING)
    notebook_workload(nb, on=machine)
    service = ServiceFactory(project=a, name="iris-api")
    replica_workload(replica(service, user=world.alice), on=machine, cpu=1, memory=2**30, gpu=1)
    theirs = PipelineRunFactory(project=world.project_b, status=RunStatus.RUNNING)
    task_workload(TaskRunFactory(run=theirs, status=TaskStatus.RUNNING), on=machine, cpu=8, gpu=4)

    response = overview(world.bob)

    html = html_of(response)
    meters = {m.label: (m.used, m.limit, m.percent) for m in response.context["stats"].meters}
    assert meters["CPU cores"] == (3.5, 8.0, 44)
    assert meters["GPUs"] == (1.0, 2.0, 50)
    assert meters["Memory"] == (5.5 * 2**30, 16 * 2**30, 34)
    assert meters["Concurrent runs"] == (1, 2, 50)
    assert meters["Concurrent tasks"] == (1, 4, 25)  # the running task; project B's is not counted
    holders = {(h.kind, h.what, h.user) for h in response.context["stats"].holders}
    assert holders == {
        ("task", f"{run} · train", "alice"),
        ("notebook", "eda", "bob"),
        ("service", "iris-api r1 #0", "alice"),
    }
    assert "Running now" in html
    assert "iris-api r1 #0" in html
    assert "Project B" not in html


def test_overview_of_a_quiet_project_shows_empty_states(world):
    html = html_of(overview(world.charlie, "project-b"))

    for message in (
        "No run is running or queued.",
        "Nothing is waiting.",
        "No runs in this period.",
        "Nothing of this project holds CPU, memory or GPUs now.",
    ):
        assert message in html
    assert stat(html, "success-rate") == "—"
    assert "no run ended yet" in html
    assert "echarts" not in html  # no chart to draw, no chart library to load
    assert "unlimited" in html  # the quota card: no limits set


def test_overview_of_another_project_is_not_found(world):
    assert overview(world.charlie, "project-a").status_code == 404


def test_overview_queries_do_not_grow_with_runs(world, django_assert_max_num_queries):
    a = world.project_a
    alice = client_for(world.alice)

    def grow(count: int) -> None:
        for i in range(count):
            status = [RunStatus.RUNNING, RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.QUEUED][i % 4]
            run = PipelineRunFactory(project=a, status=status, created_by=world.bob)
            TaskRunFactory(run=run, node="prepare", usage={"cpu_seconds": 60})
            if status in (RunStatus.RUNNING, RunStatus.QUEUED):
                TaskRunFactory(run=run, node="train", status=TaskStatus.WAITING, waiting_reason="quota")

    grow(24)  # more waiting tasks than the queue shows: its count is a query of its own from then on
    alice.get("/p/project-a/")
    # session, user, project, role, members, guardian (the audit tab), 2 run counts, task usage, queue (rows and
    # count), active runs, 2 workload kinds, 2 storage sums, notifications, the project's creator, the tasks' last
    # hour of samples (their use now is one more once a task runs), the breadcrumb's project switcher
    with django_assert_max_num_queries(22) as small:  # 22: the artifacts in the storage meter
        alice.get("/p/project-a/")
    grow(600)
    with django_assert_max_num_queries(len(small.captured_queries)):
        response = alice.get("/p/project-a/")
    stats = response.context["stats"]
    assert (stats.runs_today, stats.queue_count, len(stats.queue)) == (624, 312, dashboards.QUEUE_ROWS)
    assert stats.chart["hours"][0]["data"][-1] == round(624 * 60 / 3600, 2)
    assert len(stats.active_runs) == dashboards.ROWS


def test_overview_charts_read_the_daily_roll_ups_not_the_runs(world):
    """The 30-day charts cost the same with 10 runs or 10,000: they sum quarter hours (`RunSlot`, `TaskUsageSlot`),
    never the runs or the task attempts of the window (tests/jobs/test_slot_rollups.py: the roll-ups are true)."""
    run = PipelineRunFactory(project=world.project_a, status=RunStatus.FAILED)
    TaskRunFactory(run=run, usage={"cpu_seconds": 7200}, failure_cause="oom", status=TaskStatus.FAILED)

    with CaptureQueriesContext(connection) as captured:
        response = overview(world.bob)

    stats = response.context["stats"]
    assert (stats.runs_today, stats.failed, stats.cpu_hours) == (1, 1, 2.0)
    assert [(cause, n) for cause, _words, n in stats.failure_causes] == [("oom", 1)]
    statements = [q["sql"] for q in captured.captured_queries]
    assert sum("jobs_runslot" in sql for sql in statements) == 1
    assert sum("jobs_taskusageslot" in sql for sql in statements) == 1
    assert not any('"jobs_taskrun"."finished_at" >=' in sql for sql in statements)
    assert not any('"jobs_pipelinerun"."created_at" >=' in sql for sql in statements)


def test_overview_charts_are_the_same_before_and_after_a_compaction_and_compact_many_deltas(world, monkeypatch):
    """The page sums the summaries and the deltas not yet compacted: a compaction changes nothing it shows. When it
    read more deltas than `COMPACT_AFTER` (no beat running), it compacts them itself."""
    for status in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.FAILED):
        run = PipelineRunFactory(project=world.project_a, status=RunStatus.RUNNING)
        TaskRunFactory(run=run, usage={"cpu_seconds": 3600}, failure_cause="oom", status=TaskStatus.FAILED)
        run.status = status
        run.save(update_fields=["status"])
    shown = overview(world.bob).context["stats"]
    rollups.compact()
    assert not RunSlotDelta.objects.exists()
    compacted = overview(world.bob).context["stats"]
    assert (shown.chart, shown.failure_causes) == (compacted.chart, compacted.failure_causes)
    assert (compacted.succeeded, compacted.failed, compacted.cpu_hours) == (1, 2, 3.0)

    run.status = RunStatus.SUCCEEDED
    run.save(update_fields=["status"])
    monkeypatch.setattr(dashboards, "COMPACT_AFTER", 1)
    stats = overview(world.bob).context["stats"]
    assert (stats.succeeded, stats.failed) == (2, 1)
    assert not RunSlotDelta.objects.exists()
    assert not TaskUsageSlotDelta.objects.exists()


# --- Live progress ------------------------------------------------------------------------------------------


@pytest.mark.live
@pytest.mark.django_db(transaction=True, databases="__all__")
def test_the_socket_a_dashboard_row_opens_carries_the_runs_status_and_none_of_its_lines(live_asgi, world):
    from apps.jobs.orchestrator import publish_payload
    from tests.jobs.test_logs_ws import open_socket, write

    run = PipelineRunFactory(project=world.project_a, status=RunStatus.RUNNING)
    task = TaskRunFactory(run=run, node="prepare", status=TaskStatus.RUNNING)
    write(task, ["stored before"])
    # dashboards.js asks for the lines of task 0, which no task has
    with open_socket(live_asgi, run, world.bob, "task=0") as ws:
        snapshot = json.loads(ws.recv(timeout=10))
        assert (snapshot["type"], snapshot["status"]) == ("status", "running")
        assert (snapshot["done"], snapshot["total"]) == (0, 3)
        write(task, ["published live"])
        publish_payload(run.pk, {"type": "run.status", "run": run.pk, "status": "succeeded", "done": 3, "total": 3})
        message = json.loads(ws.recv(timeout=10))
    assert message == {"type": "status", "run": run.pk, "status": "succeeded", "done": 3, "total": 3}
