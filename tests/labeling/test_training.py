"""Train on these labels against a real Label Studio: the annotations exported as a new dataset version and the
project's training pipeline started on exactly that version, by hand (API, page) or by Label Studio's
START_TRAINING through the ML-backend webhook; lineage labeling project → version → run."""

from __future__ import annotations

import base64

import pytest
from django.contrib.auth.hashers import make_password
from django.test import Client

from apps.jobs.models import JobTemplate, PipelineRun
from apps.jobs.services import save_pipeline
from apps.labeling import mlbackend, tasks
from apps.labeling.models import LabelingExport, MLBackend
from apps.projects.models import Role
from apps.serving.models import InferenceService
from tests import factories
from tests.conftest import user_client
from tests.labeling.conftest import choice

pytestmark = pytest.mark.django_db
URL = "/api/v1/labeling-projects/"
READER = {
    "type": "object",
    "properties": {"data": {"type": "string", "x-portal-type": "dataset", "minLength": 1}},
    "required": ["data"],
    "additionalProperties": False,
}


def annotate(user, labeling, task, label: str) -> None:
    answer = user_client(user).post(
        f"{URL}{labeling.pk}/annotations/", {"task": task.pk, "result": choice(label)}, format="json"
    )
    assert answer.status_code == 201, answer.content


@pytest.fixture
def trainer(world, labeling):
    """A pipeline reading `d-labels@latest` (the labels dataset exists after a first export)."""
    first = labeling.tasks.order_by("pk").first()
    annotate(world.bob, labeling, first, "a")
    assert user_client(world.bob).post(f"{URL}{labeling.pk}/export/", format="json").status_code == 201
    JobTemplate.objects.create(
        project=world.project_a, slug="reader", version=1, name="reader", command=["{python}", "-c", "pass"],
        args_schema=READER, resources={"cpu": 0.1},
    )  # fmt: skip
    nodes = [{"name": "train", "template": "reader", "args": {"data": "d-labels@latest"}}]
    return save_pipeline(world.project_a, world.alice, name="retrain", spec={"nodes": nodes})


def test_train_on_these_labels_pins_the_new_version_in_the_run(world, labeling, trainer):
    bob = user_client(world.bob)
    chosen = bob.post(f"{URL}{labeling.pk}/training-pipeline/", {"pipeline": trainer.pk}, format="json")
    assert chosen.status_code == 200, chosen.content
    assert chosen.json() == {"pipeline": trainer.pk, "dataset": "d-labels"}
    second = labeling.tasks.order_by("pk")[1]
    annotate(world.bob, labeling, second, "b")
    answer = bob.post(f"{URL}{labeling.pk}/train/", format="json")
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert body["ref"] == "d-labels@2"
    run = PipelineRun.objects.get(pk=body["run"])
    assert run.pipeline == trainer
    assert run.trigger == "labeling"
    assert run.created_by == world.bob
    (node,) = run.spec["nodes"]
    assert node["args"]["data"] == "d-labels@2"
    assert node["datasets"]["data"]["version_id"] == body["version"]
    made = LabelingExport.objects.get(version_id=body["version"])
    assert made.labeling_project == labeling
    assert made.run == run
    assert made.annotated_tasks == 2
    page = Client()
    page.force_login(world.bob)
    assert f"/p/project-a/runs/{run.pk}/" in page.get(f"/p/project-a/labeling/{labeling.pk}/").content.decode()


def test_a_pipeline_that_does_not_read_the_labels_is_refused(world, labeling, trainer):
    other = factories.pipeline(world.project_a, world.alice, [{"name": "x", "args": {"code": "pass"}}], name="other")
    bob = user_client(world.bob)
    answer = bob.post(f"{URL}{labeling.pk}/training-pipeline/", {"pipeline": other.pk}, format="json")
    assert answer.status_code == 400
    assert "d-labels" in answer.json()["pipeline"][0]
    assert bob.post(f"{URL}{labeling.pk}/train/", format="json").status_code == 400  # none chosen
    b_pipe = factories.pipeline(world.project_b, world.charlie, [{"name": "x", "args": {"code": "pass"}}], name="b")
    answer = bob.post(f"{URL}{labeling.pk}/training-pipeline/", {"pipeline": b_pipe.pk}, format="json")
    assert answer.status_code == 400  # another project's pipeline is no pipeline of this one
    assert user_client(world.charlie).post(f"{URL}{labeling.pk}/train/", format="json").status_code == 404
    viewer = factories.UserFactory(username="vera")
    factories.add_member(world.project_a, viewer, Role.VIEWER)
    answer = user_client(viewer).post(f"{URL}{labeling.pk}/training-pipeline/", {"pipeline": trainer.pk}, format="json")
    assert answer.status_code == 403
    assert not PipelineRun.objects.exists()


def test_start_training_from_label_studio_starts_the_pipeline(world, labeling, trainer, client, monkeypatch):
    chosen = user_client(world.alice).post(f"{URL}{labeling.pk}/training-pipeline/", {"pipeline": trainer.pk},
                                           format="json")  # fmt: skip
    assert chosen.status_code == 200
    service = InferenceService.objects.create(project=world.project_a, name="digits")
    MLBackend.objects.create(labeling_project=labeling, service=service, username="u", password_hash=make_password("p"))
    good = {"HTTP_AUTHORIZATION": "Basic " + base64.b64encode(b"u:p").decode()}
    queued = []
    monkeypatch.setattr(mlbackend, "enqueue", lambda task, *args, **kw: queued.append((task.name, args)))
    body = {"action": "START_TRAINING", "project": {"id": labeling.ls_project_id}}
    assert client.post(f"/labeling/ml/{labeling.pk}/webhook", body, "application/json", **good).json()["status"] == (
        "queued"
    )
    assert client.post(f"/labeling/ml/{labeling.pk}/train", {}, "application/json", **good).json()["status"] == "queued"
    assert queued == [("apps.labeling.tasks.train", (labeling.pk,))] * 2
    second = labeling.tasks.order_by("pk")[1]
    annotate(world.bob, labeling, second, "b")
    tasks.train(labeling.pk)  # the task body, as the worker runs it: as alice, who chose the pipeline
    (run,) = PipelineRun.objects.all()
    assert run.created_by == world.alice
    assert run.trigger == "labeling"
    assert run.spec["nodes"][0]["args"]["data"] == "d-labels@2"
    assert LabelingExport.objects.get(run=run).annotated_tasks == 2
