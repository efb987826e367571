"""Duplicate and delete a pipeline from its page and the API (issue 26, point 5). A copy takes the spec, description
and layout under a free "<name>-copy" (or the name asked for); deleting keeps the runs (under the pipeline's name)
and removes its schedules, after the confirm dialog says so. Viewers see no buttons and get 403; outsiders 404."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.jobs.models import Pipeline, PipelineRun, Schedule
from apps.jobs.schedules import save_schedule
from apps.projects.models import Role
from tests import factories
from tests.conftest import user_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def pipe(world):
    pipeline = factories.pipeline(world.project_a, world.alice, [{"name": "a", "args": {"code": "print(1)"}}],
                                  name="train")  # fmt: skip
    pipeline.description, pipeline.layout = "Trains it.", {"a": {"x": 10, "y": 20}}
    pipeline.save(update_fields=["description", "layout"])
    return pipeline


def url(name: str, pipeline, project: str = "project-a") -> str:
    return reverse(f"jobs:pipeline-{name}", kwargs={"project": project, "pk": pipeline.pk})


def test_duplicate_makes_a_copy_under_a_free_name_and_opens_it(client, world, pipe):
    client.force_login(world.bob)
    response = client.post(url("duplicate", pipe))
    copy = Pipeline.objects.get(project=world.project_a, name="train-copy")
    assert response["Location"] == url("detail", copy)
    assert (copy.spec, copy.description, copy.layout) == (pipe.spec, pipe.description, pipe.layout)
    assert copy.created_by == world.bob
    client.post(url("duplicate", pipe))
    assert Pipeline.objects.filter(project=world.project_a, name="train-copy-2").exists()


def test_the_api_duplicates_under_the_name_given_and_refuses_a_taken_one(world, pipe):
    api = user_client(world.bob)
    endpoint = reverse("api:pipeline-duplicate", kwargs={"pk": pipe.pk})
    response = api.post(endpoint, {"name": "train-b"}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["name"] == "train-b"
    response = api.post(endpoint, {"name": "train"}, format="json")
    assert response.status_code == 400
    assert response.json() == {"name": ["A pipeline with this name already exists in the project."]}


def test_delete_asks_then_keeps_the_runs_and_drops_the_schedules(client, world, pipe):
    run = PipelineRun.objects.create(project=world.project_a, pipeline=pipe, pipeline_name="train", number=1,
                                     created_by=world.alice, spec=pipe.spec)  # fmt: skip
    save_schedule(pipeline=pipe, cron="0 3 * * *", timezone="UTC")
    client.force_login(world.bob)
    html = client.get(url("detail", pipe)).content.decode()
    assert f'action="{url("delete", pipe)}" data-confirm="train and its schedules (1) are deleted.' in html
    assert 'data-confirm-title="Delete this pipeline?"' in html

    response = client.post(url("delete", pipe))
    assert response["Location"] == reverse("jobs:pipeline-list", kwargs={"project": "project-a"})
    assert not Pipeline.objects.filter(pk=pipe.pk).exists()
    assert not Schedule.objects.filter(project=world.project_a).exists()
    run.refresh_from_db()
    assert (run.pipeline, run.pipeline_name) == (None, "train")


def test_the_api_deletes_through_the_same_service(world, pipe):
    assert user_client(world.bob).delete(reverse("api:pipeline-detail", kwargs={"pk": pipe.pk})).status_code == 204
    assert not Pipeline.objects.filter(pk=pipe.pk).exists()


def test_viewers_see_no_buttons_and_get_403_outsiders_404(client, world, pipe):
    viewer = factories.UserFactory(username="vera")
    factories.add_member(world.project_a, viewer, Role.VIEWER)
    client.force_login(viewer)
    html = client.get(url("detail", pipe)).content.decode()
    assert url("delete", pipe) not in html
    assert url("duplicate", pipe) not in html
    assert client.post(url("delete", pipe)).status_code == 403
    assert client.post(url("duplicate", pipe)).status_code == 403
    client.force_login(world.charlie)
    assert client.post(url("delete", pipe)).status_code == 404
    assert client.post(url("duplicate", pipe, project="project-b")).status_code == 404
    assert list(Pipeline.objects.filter(project=world.project_a).values_list("name", flat=True)) == ["train"]
