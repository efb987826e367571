"""A failure's diagnosis as the orchestrator stores it when a task ends (from its log's tail and its samples), and as
the API (task runs, runs, the project's counts by cause), the run page and the project overview show it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.test import Client

from apps.jobs.models import LogLine, ResourceSample, RunStatus, TaskRun, TaskStatus
from apps.jobs.orchestrator import _apply_phase
from apps.projects.models import Role
from apps.runtime.workload import Phase, Status
from tests.access import make_run
from tests.conftest import user_client
from tests.factories import UserFactory, add_member

START = datetime(2026, 1, 5, 10, 0, tzinfo=UTC)
MiB = 2**20


def failed(run, node: str, cause: str, detail: str, attempt: int = 1) -> TaskRun:
    return TaskRun.objects.create(
        run=run,
        node=node,
        attempt=attempt,
        status=TaskStatus.FAILED,
        failure_cause=cause,
        failure_detail=detail,
        finished_at=START,
    )


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


# --- Stored when the task ends ------------------------------------------------------------------------------


def end(task: TaskRun, status: Status) -> TaskRun:
    _apply_phase(task, status, {"name": task.node}, START, [])
    task.refresh_from_db()
    return task


def test_the_end_of_a_failed_task_stores_what_its_log_tail_says(world):
    run = make_run(world.project_a, world.alice)
    task = TaskRun.objects.create(run=run, node="a", status=TaskStatus.RUNNING)
    lines = [f"step {i}" for i in range(500)] + ["Traceback (most recent call last):", "MemoryError"]
    LogLine.objects.bulk_create(
        LogLine(run=run, task=task, node="a", attempt=1, seq=i + 1, ts=START, text=text) for i, text in enumerate(lines)
    )

    task = end(task, Status(Phase.FAILED, exit_code=1, reason="exited with code 1"))

    assert (task.failure_cause, task.failure_detail) == ("oom", "MemoryError")


def test_only_the_tail_of_the_log_is_read(world):
    run = make_run(world.project_a, world.alice)
    task = TaskRun.objects.create(run=run, node="a", status=TaskStatus.RUNNING)
    lines = ["ModuleNotFoundError: No module named 'early'"] + [f"step {i}" for i in range(300)]
    LogLine.objects.bulk_create(
        LogLine(run=run, task=task, node="a", attempt=1, seq=i + 1, ts=START, text=text) for i, text in enumerate(lines)
    )

    task = end(task, Status(Phase.FAILED, exit_code=3, reason="exited with code 3"))

    assert (task.failure_cause, task.failure_detail) == ("error", "exit code 3")


def test_samples_of_an_idle_gpu_and_a_busy_cpu_make_it_input_bound(world):
    run = make_run(world.project_a, world.alice)
    task = TaskRun.objects.create(run=run, node="a", status=TaskStatus.RUNNING, resources={"gpu": 1})
    ResourceSample.objects.bulk_create(
        ResourceSample(
            task=task, ts=START + timedelta(seconds=i), cpu_percent=99.0, rss_bytes=MiB, gpu_percent=3.0 if i else 90
        )
        for i in range(20)
    )

    task = end(task, Status(Phase.FAILED, reason="timeout: still running after 600 s"))

    assert task.failure_cause == "input_bound"
    assert task.diagnosis["suggestion"].startswith("Feed the GPU faster: more data-loader workers")


def test_a_peak_at_the_limit_from_the_runtimes_usage_counts(world):
    run = make_run(world.project_a, world.alice)
    task = TaskRun.objects.create(run=run, node="a", status=TaskStatus.RUNNING, resources={"memory": 100 * MiB})

    task = end(task, Status(Phase.FAILED, exit_code=1, reason="exited with code 1", usage={"peak_rss_bytes": 98 * MiB}))

    assert task.failure_cause == "memory_at_limit"


def test_a_task_that_succeeds_or_is_cancelled_has_no_diagnosis(world):
    run = make_run(world.project_a, world.alice)
    ok = end(TaskRun.objects.create(run=run, node="a", status=TaskStatus.RUNNING), Status(Phase.SUCCEEDED, 0))
    gone = end(TaskRun.objects.create(run=run, node="b", status=TaskStatus.RUNNING), Status(Phase.CANCELLED))
    assert (ok.failure_cause, gone.failure_cause) == ("", "")
    assert ok.diagnosis is None


# --- API ----------------------------------------------------------------------------------------------------


def test_a_task_run_carries_its_diagnosis(world):
    run = make_run(world.project_a, world.alice)
    task = failed(run, "a", "oom", "the task used 400 MiB, over its memory limit of 128 MiB")
    ok = TaskRun.objects.create(run=run, node="b", status=TaskStatus.SUCCEEDED)

    api = user_client(world.bob)
    body = api.get(f"/api/v1/task-runs/{task.pk}/").json()
    assert body["diagnosis"]["cause"] == "oom"
    assert body["diagnosis"]["message"] == "out of memory: the task used 400 MiB, over its memory limit of 128 MiB"
    assert "gradient checkpointing" in body["diagnosis"]["suggestion"]
    assert api.get(f"/api/v1/task-runs/{ok.pk}/").json()["diagnosis"] is None
    listed = api.get(f"/api/v1/task-runs/?run={run.pk}&cause=oom").json()["results"]
    assert [t["id"] for t in listed] == [task.pk]
    assert api.get("/api/v1/task-runs/?cause=bogus").status_code == 400


def test_a_run_lists_its_failed_attempts_diagnoses_without_a_query_per_run(world, django_assert_max_num_queries):
    for _ in range(3):
        run = make_run(world.project_a, world.alice)
        failed(run, "a", "module_not_found", "ModuleNotFoundError: No module named 'x'")
        failed(run, "a", "oom", "MemoryError", attempt=2)
    api = user_client(world.bob)

    with django_assert_max_num_queries(12) as few:
        api.get("/api/v1/runs/?project=project-a")
    for _ in range(5):
        run = make_run(world.project_a, world.alice)
        failed(run, "a", "oom", "MemoryError")
    with django_assert_max_num_queries(len(few.captured_queries)):
        body = api.get("/api/v1/runs/?project=project-a").json()

    first = api.get(f"/api/v1/runs/{run.pk}/").json()["failures"]
    assert [(f["node"], f["attempt"], f["cause"]) for f in first] == [("a", 1, "oom")]
    assert all("failures" in r for r in body["results"])


def test_the_project_counts_its_failures_by_cause(world):
    run = make_run(world.project_a, world.alice)
    failed(run, "a", "oom", "x")
    failed(run, "a", "oom", "y", attempt=2)
    failed(run, "b", "connection_refused", "Connection refused")
    failed(make_run(world.project_b, world.charlie), "a", "disk_full", "No space left on device")

    body = user_client(world.bob).get("/api/v1/task-runs/failures/?project=project-a").json()

    assert body["project"] == "project-a"
    assert body["total"] == 3
    assert [(c["cause"], c["count"], c["title"]) for c in body["causes"]] == [
        ("oom", 2, "out of memory"),
        ("connection_refused", 1, "connection refused"),
    ]
    assert body["causes"][0]["suggestion"]


def test_the_project_counts_need_a_project_the_user_sees(world):
    api = user_client(world.charlie)
    assert api.get("/api/v1/task-runs/failures/?project=project-a").status_code == 404
    assert api.get("/api/v1/task-runs/failures/").status_code == 400
    assert user_client(UserFactory()).get("/api/v1/task-runs/failures/?project=project-a").status_code == 404


def test_a_viewer_reads_the_counts(world):
    viewer = UserFactory()
    add_member(world.project_a, viewer, Role.VIEWER)
    assert user_client(viewer).get("/api/v1/task-runs/failures/?project=project-a").json()["total"] == 0


# --- Pages ----------------------------------------------------------------------------------------------------


def test_the_run_page_shows_the_failed_nodes_cause_and_next_step(world):
    run = make_run(world.project_a, world.alice)
    run.status = RunStatus.FAILED
    run.save(update_fields=["status"])
    failed(run, "a", "oom", "the task used 400 MiB, over its memory limit of 128 MiB")

    page = client_for(world.bob).get(f"/p/project-a/runs/{run.pk}/").content.decode()

    assert 'data-diagnosis="oom"' in page
    assert "out of memory: the task used 400 MiB, over its memory limit of 128 MiB" in page
    assert "Next step:" in page
    assert "fp16/bf16 mixed precision" in page


def test_the_overview_counts_the_failures_of_the_window_by_cause(world):
    run = make_run(world.project_a, world.alice)
    for node in ("a", "b"):
        task = failed(run, node, "gpu_oom", "CUDA out of memory")
        TaskRun.objects.filter(pk=task.pk).update(finished_at=datetime.now(UTC))
    task = failed(run, "c", "nccl_timeout", "NCCL watchdog timeout")
    TaskRun.objects.filter(pk=task.pk).update(finished_at=datetime.now(UTC))
    failed(run, "d", "oom", "long ago")  # finished at START: outside the window

    page = client_for(world.bob).get("/p/project-a/").content.decode()

    section = page[page.index('id="overview-failures"') :]
    assert '<li class="list-group-item d-flex justify-content-between" data-cause="gpu_oom">' in section
    assert section.index('data-cause="gpu_oom"') < section.index('data-cause="nccl_timeout"')
    assert 'data-cause="oom"' not in section[: section.index("</ul>")]
