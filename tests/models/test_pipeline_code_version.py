"""A tracked run started by a pipeline task records which code ran: the task's template as `slug@version` (what
the frozen run resolved), its pipeline run and node, and the image it ran in."""

from __future__ import annotations

from django.urls import reverse

from apps.jobs.models import PipelineRun
from apps.models import services
from tests.factories import experiment, python_template


def test_a_pipeline_tasks_run_records_its_template_version_and_image(world):
    template = python_template(image="registry.example.com/team/trainer:1.4")
    spec = {"nodes": [{"name": "train", "template": "py@1", "template_id": template.pk, "depends_on": []}]}
    pipeline_run = PipelineRun.objects.create(
        project=world.project_a, pipeline_name="pipe", number=1, created_by=world.alice, spec=spec
    )
    task = pipeline_run.tasks.create(node="train")
    run = services.create_run(experiment(world.project_a, "exp"), user=world.alice, source_task=task)
    tags = dict(run.tags.values_list("key", "value"))
    assert tags["portal.template"] == "py@1"
    assert tags["portal.pipeline_run"] == str(pipeline_run.pk)
    assert tags["portal.task"] == "train"
    assert tags["portal.image"] == run.image == "registry.example.com/team/trainer:1.4"
    # what the client sends wins over what the portal infers
    own = services.create_run(
        experiment(world.project_a, "exp"), user=world.alice, source_task=task, tags=[("portal.image", "mine:2")]
    )
    assert (own.image, dict(own.tags.values_list("key", "value"))["portal.image"]) == ("mine:2", "mine:2")


def test_a_run_of_a_task_whose_image_digest_is_known_records_it(world, client):
    template = python_template(image="python:3.12-slim")
    spec = {"nodes": [{"name": "train", "template": "py@1", "template_id": template.pk, "depends_on": []}]}
    pipeline_run = PipelineRun.objects.create(
        project=world.project_a, pipeline_name="pipe", number=1, created_by=world.alice, spec=spec
    )
    unknown = pipeline_run.tasks.create(node="train")
    run = services.create_run(experiment(world.project_a, "exp"), user=world.alice, source_task=unknown)
    assert "portal.image.digest" not in dict(run.tags.values_list("key", "value"))

    digest = "docker.io/library/python@sha256:" + "e" * 64
    known = pipeline_run.tasks.create(node="train", attempt=2, image_digest=digest)
    run = services.create_run(experiment(world.project_a, "exp"), user=world.alice, source_task=known)
    assert dict(run.tags.values_list("key", "value"))["portal.image.digest"] == digest
    # The run's page shows it next to the image.
    client.force_login(world.alice)
    page = client.get(reverse("models:run-detail", kwargs={"project": world.project_a.slug, "pk": run.pk}))
    assert f'<code class="small" id="run-image-digest">{digest}</code>' in page.content.decode()
