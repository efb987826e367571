"""A tracked run started by a pipeline task records which code ran: the task's template as `slug@version` (what
the frozen run resolved), its pipeline run and node, and the image it ran in."""

from __future__ import annotations

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
