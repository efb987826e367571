"""Run lists filtered by one FilterSet (apps/jobs/filters.py): the run list page and /api/v1/runs/ share its filters;
on the page `pipeline` is a part of the pipeline's name (what a person types), in the API the pipeline's id."""

from __future__ import annotations

from django.urls import reverse

from apps.jobs.models import PipelineRun
from tests.conftest import user_client


def make_run(world, name: str, number: int, status: str = "queued", pipeline=None) -> PipelineRun:
    return PipelineRun.objects.create(
        project=world.project_a,
        pipeline=pipeline,
        pipeline_name=name,
        number=number,
        status=status,
        created_by=world.alice,
        spec={"nodes": []},
    )


def listed(response) -> list[int]:
    assert response.status_code == 200
    return [run.pk for run in response.context["page"].object_list]


def test_the_page_finds_runs_by_a_part_of_their_pipelines_name_and_their_status(world, client):
    train = make_run(world, "train-model", 1, status="failed")
    retrain = make_run(world, "retrain", 2)
    other = make_run(world, "export", 3, status="failed")
    client.force_login(world.alice)
    runs = reverse("jobs:run-list", kwargs={"project": "project-a"})

    assert listed(client.get(runs, {"pipeline": "TRAIN"})) == [retrain.pk, train.pk]
    assert listed(client.get(runs, {"pipeline": "train", "status": "failed"})) == [train.pk]
    assert listed(client.get(runs, {"status": "failed"})) == [other.pk, train.pk]
    page = client.get(runs, {"pipeline": "train"}).content.decode()
    assert 'name="pipeline" value="train"' in page
    assert "form-select" in page  # the status box is styled as before


def test_the_api_filters_by_the_pipelines_id_and_the_status(world):
    from tests.factories import pipeline

    pipe = pipeline(world.project_a, world.alice, [{"name": "a", "args": {"code": "pass"}}], name="train")
    ours = make_run(world, "train", 1, status="failed", pipeline=pipe)
    make_run(world, "train", 2)
    client = user_client(world.alice)

    by_pipeline = client.get("/api/v1/runs/", {"pipeline": pipe.pk, "status": "failed"}).json()["results"]

    assert [r["id"] for r in by_pipeline] == [ours.pk]
    assert client.get("/api/v1/runs/", {"pipeline": "train"}).status_code == 400  # an id, as the schema says
