"""/api/v1/runs/ and /api/v1/task-runs/: list with progress, cancel, retry, re-run from a node, delete.

No agent: runs are queued by the services and their tasks written directly, which is all these endpoints read.
Who may reach which endpoint is test_access_matrix.py's job; these tests check content and effects.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.jobs import orchestrator
from apps.jobs.models import PipelineRun, RunStatus, TaskRun, TaskStatus
from apps.jobs.services import start_run
from apps.projects.models import Role
from tests.conftest import token_client, user_client
from tests.factories import UserFactory, add_member, pipeline

LIST_URL = "/api/v1/runs/"
TASKS_URL = "/api/v1/task-runs/"


def detail_url(pk: int, action: str = "") -> str:
    return f"{LIST_URL}{pk}/" + (f"{action}/" if action else "")


def two_steps(project, owner, name: str = "pipe"):
    return pipeline(
        project,
        owner,
        [{"name": "a", "args": {"code": "1"}}, {"name": "b", "depends_on": ["a"], "args": {"code": "2"}}],
        name=name,
    )


def finish(run: PipelineRun, statuses: dict[str, str], run_status: str) -> PipelineRun:
    """Write the tasks a run would have had (one attempt per node) and its final status."""
    now = timezone.now()
    for node, status in statuses.items():
        TaskRun.objects.create(
            run=run,
            node=node,
            status=status,
            output_dir=f"/outputs/{run.pk}/{node}" if status == TaskStatus.SUCCEEDED else "",
            output_digest="d" * 8 if status == TaskStatus.SUCCEEDED else "",
            started_at=now,
            finished_at=now,
        )
    run.status, run.started_at, run.finished_at = run_status, now, now
    run.save()
    return run


@pytest.fixture
def pipe(world):
    return two_steps(world.project_a, world.alice)


@pytest.fixture
def alice(world):
    return user_client(world.alice)


@pytest.fixture
def failed_run(pipe, world) -> PipelineRun:
    run = start_run(pipe, world.alice)
    return finish(run, {"a": TaskStatus.SUCCEEDED, "b": TaskStatus.FAILED}, RunStatus.FAILED)


# --- list and retrieve ------------------------------------------------------------------------


def test_list_shows_runs_newest_first_with_progress(alice, pipe, world):
    first = start_run(pipe, world.alice)
    TaskRun.objects.create(run=first, node="a", status=TaskStatus.SUCCEEDED)
    TaskRun.objects.create(run=first, node="b", status=TaskStatus.RUNNING)
    second = start_run(pipe, world.alice)

    response = alice.get(LIST_URL)

    assert response.status_code == 200
    body = response.json()
    assert body["count"] == 2
    rows = body["results"]
    assert [(r["id"], r["number"], r["status"]) for r in rows] == [(second.pk, 2, "queued"), (first.pk, 1, "queued")]
    assert [r["progress"] for r in rows] == [{"done": 0, "total": 2}, {"done": 1, "total": 2}]
    assert rows[1]["project"] == "project-a"
    assert rows[1]["created_by"] == "alice"
    assert rows[1]["pipeline_name"] == "pipe"


def test_retries_of_a_node_count_once_in_progress(alice, pipe, world):
    run = start_run(pipe, world.alice)
    TaskRun.objects.create(run=run, node="a", status=TaskStatus.FAILED)
    TaskRun.objects.create(run=run, node="a", attempt=2, status=TaskStatus.SUCCEEDED)

    response = alice.get(detail_url(run.pk))

    assert response.status_code == 200
    assert response.json()["progress"] == {"done": 1, "total": 2}


def test_retrieve_shows_the_frozen_spec(alice, pipe, world):
    run = start_run(pipe, world.alice)

    body = alice.get(detail_url(run.pk)).json()

    assert body["id"] == run.pk
    assert body["pipeline"] == pipe.pk
    assert [n["name"] for n in body["spec"]["nodes"]] == ["a", "b"]
    assert {n["template"] for n in body["spec"]["nodes"]} == {"py@1"}
    assert body["rerun_of"] is None
    assert body["trigger"] == "manual"


def test_list_filters_by_status(alice, pipe, world, failed_run):
    queued = start_run(pipe, world.alice)

    body = alice.get(LIST_URL, {"status": "failed"}).json()

    assert [r["id"] for r in body["results"]] == [failed_run.pk]
    assert [r["id"] for r in alice.get(LIST_URL, {"status": "queued"}).json()["results"]] == [queued.pk]


def test_a_project_token_of_another_project_cannot_see_the_runs(pipe, world):
    run = start_run(pipe, world.alice)
    add_member(world.project_b, world.alice, Role.EDITOR)
    other = start_run(two_steps(world.project_b, world.charlie), world.charlie)
    client = token_client(world.alice, project=world.project_b)

    assert client.get(detail_url(run.pk)).status_code == 404
    assert [r["id"] for r in client.get(LIST_URL).json()["results"]] == [other.pk]
    assert client.get(TASKS_URL, {"run": run.pk}).json()["results"] == []
    # Without the token's limit alice sees both.
    assert user_client(world.alice).get(detail_url(run.pk)).status_code == 200


def test_an_outsider_gets_404(pipe, world):
    run = start_run(pipe, world.alice)

    assert user_client(world.charlie).get(detail_url(run.pk)).status_code == 404
    assert user_client(world.charlie).get(LIST_URL).json()["count"] == 0


# --- cancel -----------------------------------------------------------------------------------


def test_cancel_of_a_queued_run_cancels_it_once_the_orchestrator_moves(alice, pipe, world):
    run = start_run(pipe, world.alice)

    response = alice.post(detail_url(run.pk, "cancel"))

    assert response.status_code == 200
    assert response.json()["status"] == "cancelling"
    orchestrator.advance_run(run.pk)
    run.refresh_from_db()
    assert run.status == "cancelled"
    assert run.finished_at is not None
    assert set(run.tasks.values_list("node", "status")) == {("a", "cancelled"), ("b", "cancelled")}
    assert alice.get(detail_url(run.pk)).json()["progress"] == {"done": 2, "total": 2}


def test_cancel_of_a_finished_run_changes_nothing(alice, failed_run):
    response = alice.post(detail_url(failed_run.pk, "cancel"))

    assert response.status_code == 200
    assert response.json()["status"] == "failed"
    failed_run.refresh_from_db()
    assert failed_run.status == "failed"


def test_a_viewer_cannot_cancel(pipe, world):
    run = start_run(pipe, world.alice)
    viewer = UserFactory(username="vera")
    add_member(world.project_a, viewer, Role.VIEWER)

    response = user_client(viewer).post(detail_url(run.pk, "cancel"))

    assert response.status_code == 403
    run.refresh_from_db()
    assert run.status == "queued"


# --- retry and re-run -------------------------------------------------------------------------


def test_retry_reruns_what_failed_and_reuses_what_succeeded(alice, failed_run):
    response = alice.post(detail_url(failed_run.pk, "retry"))

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["trigger"] == "rerun"
    assert body["rerun_of"] == failed_run.pk
    assert body["number"] == failed_run.number + 1
    assert body["status"] == "queued"
    assert [n["cache"] for n in body["spec"]["nodes"]] == [True, False]  # the node to run again really runs
    assert body["spec"] == {**failed_run.spec, "nodes": [failed_run.spec["nodes"][0], body["spec"]["nodes"][1]]}
    new = PipelineRun.objects.get(pk=body["id"])
    [reused] = new.tasks.all()
    assert (reused.node, reused.status) == ("a", "cached")
    assert reused.output_dir == f"/outputs/{failed_run.pk}/a"
    assert reused.cached_from == failed_run.tasks.get(node="a")
    assert body["progress"] == {"done": 1, "total": 2}


def test_rerun_from_a_node_runs_it_and_its_downstream_again(alice, pipe, world):
    run = finish(start_run(pipe, world.alice), {"a": "succeeded", "b": "succeeded"}, RunStatus.SUCCEEDED)

    from_b = alice.post(detail_url(run.pk, "rerun"), {"node": "b"}, format="json")
    from_a = alice.post(detail_url(run.pk, "rerun"), {"node": "a"}, format="json")

    assert from_b.status_code == 201, from_b.content
    assert (from_b.json()["trigger"], from_b.json()["rerun_of"]) == ("rerun", run.pk)
    assert list(TaskRun.objects.filter(run_id=from_b.json()["id"]).values_list("node", "status")) == [("a", "cached")]
    assert from_a.status_code == 201
    assert not TaskRun.objects.filter(run_id=from_a.json()["id"]).exists()  # everything runs again


def test_rerun_without_a_node_is_a_retry(alice, failed_run):
    response = alice.post(detail_url(failed_run.pk, "rerun"), {}, format="json")

    assert response.status_code == 201
    assert list(TaskRun.objects.filter(run_id=response.json()["id"]).values_list("node", flat=True)) == ["a"]


def test_rerun_from_an_unknown_node_is_an_error_on_node(alice, failed_run):
    response = alice.post(detail_url(failed_run.pk, "rerun"), {"node": "nope"}, format="json")

    assert response.status_code == 400
    assert response.json() == {"node": ["No node “nope” in this run."]}
    assert PipelineRun.objects.count() == 1


def test_an_unfinished_run_cannot_be_retried(alice, pipe, world):
    run = start_run(pipe, world.alice)

    retry = alice.post(detail_url(run.pk, "retry"))
    rerun = alice.post(detail_url(run.pk, "rerun"), {"node": "a"}, format="json")

    assert retry.status_code == rerun.status_code == 400
    assert retry.json() == {"status": ["Wait for the run to finish, or cancel it, before running it again."]}
    assert PipelineRun.objects.count() == 1


def test_a_viewer_cannot_retry(failed_run, world):
    viewer = UserFactory(username="vera")
    add_member(world.project_a, viewer, Role.VIEWER)

    assert user_client(viewer).post(detail_url(failed_run.pk, "retry")).status_code == 403
    assert user_client(viewer).post(detail_url(failed_run.pk, "rerun"), {"node": "a"}).status_code == 403
    assert PipelineRun.objects.count() == 1


# --- delete -----------------------------------------------------------------------------------


def test_an_unfinished_run_cannot_be_deleted(alice, pipe, world):
    run = start_run(pipe, world.alice)

    response = alice.delete(detail_url(run.pk))

    assert response.status_code == 400
    assert response.json() == {"status": ["Cancel the run before deleting it."]}
    assert PipelineRun.objects.filter(pk=run.pk).exists()


def test_a_finished_run_is_deleted_with_its_tasks(alice, failed_run):
    response = alice.delete(detail_url(failed_run.pk))

    assert response.status_code == 204
    assert not PipelineRun.objects.filter(pk=failed_run.pk).exists()
    assert not TaskRun.objects.exists()


def test_deleting_a_run_removes_its_work_folder_after_commit(
    alice, failed_run, settings, tmp_path, django_capture_on_commit_callbacks
):
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    folder = tmp_path / "work" / failed_run.project.slug / f"run-{failed_run.number}"
    (folder / "a" / "attempt-1").mkdir(parents=True)
    (folder / "a" / "attempt-1" / "model.bin").write_bytes(b"x")

    with django_capture_on_commit_callbacks(execute=True):
        response = alice.delete(detail_url(failed_run.pk))

    assert response.status_code == 204
    assert not folder.exists()


def test_attempts_a_later_run_reuses_stay_when_their_run_is_deleted(
    alice, pipe, world, failed_run, settings, tmp_path, django_capture_on_commit_callbacks
):
    """A re-run (or a cache hit) reads an earlier attempt's output folder in place: it must outlive its run."""
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    folder = tmp_path / "work" / failed_run.project.slug / f"run-{failed_run.number}"
    reused, dropped = folder / "a" / "attempt-1", folder / "b" / "attempt-1"
    for path in (reused, dropped):
        path.mkdir(parents=True)
        (path / "out.txt").write_text("x")
    later = finish(start_run(pipe, world.alice), {"b": TaskStatus.FAILED}, RunStatus.FAILED)
    TaskRun.objects.create(run=later, node="a", status=TaskStatus.CACHED, output_dir=str(reused))

    with django_capture_on_commit_callbacks(execute=True):
        assert alice.delete(detail_url(failed_run.pk)).status_code == 204

    assert (reused / "out.txt").read_text() == "x"
    assert not dropped.exists()


# --- task runs --------------------------------------------------------------------------------


def test_task_runs_of_a_run_list_every_attempt(alice, pipe, world, failed_run):
    TaskRun.objects.create(run=failed_run, node="b", attempt=2, status=TaskStatus.FAILED, exit_code=1)
    other = finish(start_run(pipe, world.alice), {"a": "succeeded"}, RunStatus.FAILED)

    response = alice.get(TASKS_URL, {"run": failed_run.pk})

    assert response.status_code == 200
    rows = response.json()["results"]
    assert [(r["run"], r["node"], r["attempt"], r["status"]) for r in rows] == [
        (failed_run.pk, "a", 1, "succeeded"),
        (failed_run.pk, "b", 1, "failed"),
        (failed_run.pk, "b", 2, "failed"),
    ]
    assert rows[2]["exit_code"] == 1
    assert rows[0]["output_dir"] == f"/outputs/{failed_run.pk}/a"
    assert rows[0]["duration"] == 0.0
    assert alice.get(TASKS_URL, {"run": other.pk}).json()["count"] == 1


def test_a_task_run_shows_the_digest_of_the_image_it_ran(alice, failed_run):
    digest = "docker.io/library/python@sha256:" + "c" * 64
    TaskRun.objects.filter(run=failed_run, node="a").update(image_digest=digest)

    rows = {r["node"]: r for r in alice.get(TASKS_URL, {"run": failed_run.pk}).json()["results"]}

    assert rows["a"]["image_digest"] == digest
    assert rows["b"]["image_digest"] == ""  # not known (the local runtime runs no image)
    # Read-only: what the runtime reported cannot be rewritten through the API.
    response = alice.patch(f"{TASKS_URL}{rows['a']['id']}/", {"image_digest": "x"}, format="json")
    assert response.status_code == 405
    assert TaskRun.objects.get(pk=rows["a"]["id"]).image_digest == digest


# --- query counts -----------------------------------------------------------------------------


def count_queries(get: Callable[[], object]) -> int:
    with CaptureQueriesContext(connection) as ctx:
        response = get()
    assert response.status_code == 200, response.content
    return len(ctx.captured_queries)


def test_the_run_list_does_not_grow_with_runs(alice, pipe, world, django_assert_max_num_queries):
    def get():
        return alice.get(LIST_URL)

    finish(start_run(pipe, world.alice), {"a": "succeeded", "b": "failed"}, RunStatus.FAILED)
    get()  # warm caches (content types) so that the measurement is not inflated
    one = count_queries(get)
    for i in range(19):
        run = start_run(pipe, world.alice)
        if i % 2:
            finish(run, {"a": "succeeded"}, RunStatus.RUNNING)

    with django_assert_max_num_queries(one):
        response = get()

    body = response.json()
    assert body["count"] == len(body["results"]) == 20
    assert sorted({r["progress"]["done"] for r in body["results"]}) == [0, 1, 2]


def test_the_task_run_list_does_not_grow_with_tasks(alice, failed_run, pipe, world, django_assert_max_num_queries):
    def get():
        return alice.get(TASKS_URL)

    get()
    one = count_queries(get)
    for _ in range(9):
        finish(start_run(pipe, world.alice), {"a": "succeeded", "b": "failed"}, RunStatus.FAILED)

    with django_assert_max_num_queries(one):
        assert get().json()["count"] == 20
