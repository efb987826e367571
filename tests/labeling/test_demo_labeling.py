"""The demo's digits labeling project (`apps/labeling/demo.py`), against the session's real Label Studio: made as
Label Studio, the portal and the digits service come up, with the demo's digits classifier attached as its
auto-labeler and a stored prediction for every task; deferred (never failed) while Label Studio is down or labeling
is off. The full `manage.py demo` is tested in tests/portal/test_demo_command.py; this calls its labeling part.
"""

from __future__ import annotations

import time

import pytest
from django.db import transaction

from apps.datasets.models import Dataset
from apps.labeling import demo, server
from apps.labeling.models import LabelingProject, MLBackend
from apps.models import artifacts
from apps.models.models import ModelAlias
from apps.outbox.models import PendingTask
from apps.serving.models import InferenceService, Replica, Revision
from tests.labeling.conftest import ModelServer

pytestmark = pytest.mark.django_db
COMPLETE = "apps.labeling.tasks.complete_demo"


@pytest.fixture
def portal(ls, live_server, settings):
    """Label Studio calls the portal back (ML backend /health, /setup): the portal runs as the live server."""
    settings.LABELING_PORTAL_URL = live_server.url
    return live_server


def serve(service: InferenceService, tmp_path) -> ModelServer:
    """The agent's part, by hand: the registered version's model file served by a model-server process, as the
    service's ready replica."""
    version = ModelAlias.objects.get(registered_model=service.registered_model, alias=demo.ALIAS).model_version
    base = version.run.artifact_uri.removeprefix("mlflow-artifacts:").lstrip("/")
    path = tmp_path / "model.pkl"
    with artifacts.open_file(f"{base}/model/model.pkl") as fh:
        path.write_bytes(fh.read())
    srv = ModelServer(path, "digits")
    revision = Revision.objects.create(service=service, number=1, config={"model_name": "digits"})
    Replica.objects.create(revision=revision, index=0, upstream=srv.url, status=Replica.Status.READY)
    service.current_revision = revision
    service.save(update_fields=["current_revision"])
    return srv


@pytest.mark.django_db(transaction=True)  # Label Studio calls the live server back
def test_the_demo_labeling_project_gets_a_stored_prediction_for_every_task(world, portal, tmp_path):
    project, user = world.project_a, world.alice
    with transaction.atomic():  # as `manage.py demo` runs it: queued when it commits
        service = demo.populate(project, user)
        (queued,) = PendingTask.objects.filter(name=COMPLETE)
    assert service.name == "digits"
    assert service.current_revision_id is None  # no agent: it waits
    assert queued.args[:2] == [project.pk, user.pk]
    assert not LabelingProject.objects.exists()  # the Label Studio part is the task's

    srv = serve(service, tmp_path)
    try:
        assert demo.complete(*queued.args)  # the task body, as the worker runs it
    finally:
        srv.stop()

    labeling = LabelingProject.objects.get(project=project, name="digits")
    assert labeling.task_count == demo.COUNT
    assert MLBackend.objects.get(labeling_project=labeling).service == service
    with server.connect() as client:
        tasks = list(client.list_tasks(labeling.ls_project_id))
        stored = {t["id"]: client.request("GET", "/api/predictions/", params={"task": t["id"]}) for t in tasks}
    assert len(tasks) == demo.COUNT
    right = 0
    for task in tasks:
        (prediction,) = stored[task["id"]]
        assert prediction["model_version"] == "digits@r1"
        assert 0 < prediction["score"] <= 1
        (choice,) = prediction["result"][0]["value"]["choices"]
        right += choice == task["data"]["path"][-5]  # images/digit-<index>-<true digit>.png
    assert right >= 0.85 * demo.COUNT  # the classifier never saw these 48 digits
    assert demo.done(project)
    with transaction.atomic():
        assert demo.populate(project, user) == service
        assert not PendingTask.objects.filter(name=COMPLETE).exists()  # done: nothing queued again


def test_while_label_studio_is_down_the_demo_waits_and_catches_up(world, ls, settings):
    project, user = world.project_a, world.alice
    service = demo.populate(project, user)
    InferenceService.objects.filter(pk=service.pk).update(name="renamed")  # this test is about the labeling project
    PendingTask.objects.all().delete()
    settings.LABEL_STUDIO_URL = "http://127.0.0.1:9"  # nothing listens there

    assert not demo.complete(project.pk, user.pk, time.time() + 60)
    assert not LabelingProject.objects.exists()
    (again,) = PendingTask.objects.filter(name=COMPLETE)
    assert again.eta is not None  # tried again later

    settings.LABEL_STUDIO_URL = ls.url  # Label Studio is back
    assert demo.complete(*again.args)
    labeling = LabelingProject.objects.get(project=project, name="digits")
    assert labeling.status == LabelingProject.Status.READY
    with server.connect() as client:
        paths = sorted(t["data"]["path"] for t in client.list_tasks(labeling.ls_project_id))
    assert paths[:2] == ["images/digit-00-0.png", "images/digit-01-1.png"]
    assert len(paths) == demo.COUNT


def test_past_its_deadline_the_demo_stops_trying(world, settings):
    demo.populate(world.project_a, world.alice)
    PendingTask.objects.all().delete()
    settings.LABEL_STUDIO_URL = "http://127.0.0.1:9"
    assert not demo.complete(world.project_a.pk, world.alice.pk, time.time() - 1)
    assert not PendingTask.objects.exists()
    assert not LabelingProject.objects.exists()


def test_labeling_off_leaves_the_digits_example_out(world, settings):
    settings.LABELING = "off"
    assert demo.populate(world.project_a, world.alice) is None
    assert not Dataset.objects.filter(name="digits").exists()
    assert not PendingTask.objects.exists()
