"""A run's progress: its nodes with a finished attempt, out of its nodes. One definition (`finished_nodes`), read by
the run list, the API and the dashboards (annotated) and by one run alone (`PipelineRun.progress`)."""

from __future__ import annotations

from apps.jobs.models import PipelineRun, TaskRun, TaskStatus
from tests.conftest import user_client


def three_node_run(world) -> PipelineRun:
    nodes = [{"name": name, "template": "py@1", "depends_on": []} for name in ("a", "b", "c")]
    run = PipelineRun.objects.create(
        project=world.project_a, pipeline_name="pipe", number=1, created_by=world.alice, spec={"nodes": nodes}
    )
    TaskRun.objects.create(run=run, node="a", attempt=1, status=TaskStatus.SUCCEEDED)
    TaskRun.objects.create(run=run, node="b", attempt=1, status=TaskStatus.FAILED)
    TaskRun.objects.create(run=run, node="b", attempt=2, status=TaskStatus.RUNNING)  # a retry: b counts once
    TaskRun.objects.create(run=run, node="c", attempt=1, status=TaskStatus.QUEUED)
    return run


def test_an_annotated_list_and_one_run_count_the_same_nodes(world):
    run = three_node_run(world)

    annotated = PipelineRun.objects.filter(pk=run.pk).with_progress().get()

    assert annotated.done_count == 2
    assert annotated.progress() == (2, 3)
    assert PipelineRun.objects.get(pk=run.pk).progress() == (2, 3)


def test_a_run_without_attempts_has_done_nothing(world):
    run = PipelineRun.objects.create(
        project=world.project_a, pipeline_name="pipe", number=1, created_by=world.alice, spec={"nodes": []}
    )

    assert PipelineRun.objects.filter(pk=run.pk).with_progress().get().done_count == 0
    assert run.progress() == (0, 0)


def test_the_api_and_the_run_list_show_that_progress(world, client):
    run = three_node_run(world)

    listed = user_client(world.alice).get("/api/v1/runs/").json()["results"]
    one = user_client(world.alice).get(f"/api/v1/runs/{run.pk}/").json()
    client.force_login(world.alice)
    page = client.get("/p/project-a/runs/").content.decode()

    assert [r["progress"] for r in listed] == [{"done": 2, "total": 3}]
    assert one["progress"] == {"done": 2, "total": 3}
    assert ">2/3</span>" in page
