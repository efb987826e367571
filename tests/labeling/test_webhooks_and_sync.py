"""Webhooks (secret header, ack at once, work queued) and the sync of progress from a real Label Studio."""

from __future__ import annotations

import pytest
from django.test import Client

from apps.labeling import server, sync, tasks
from apps.labeling.models import LabelingProject
from apps.outbox.models import PendingTask
from tests import factories

pytestmark = pytest.mark.django_db
PNG = b"\x89PNG\r\n\x1a\n"
SYNC = "apps.labeling.tasks.sync_project"


@pytest.fixture
def labeling(world, ls):
    version = factories.dataset_version(
        factories.dataset(world.project_a, world.alice), {f"{i}.png": PNG for i in range(3)}
    )
    from apps.labeling.services import create_labeling_project

    return create_labeling_project(
        world.project_a, world.alice, name="d", dataset_version=version, kind="image_classification", labels=["a", "b"]
    )


def choice(value: str) -> list[dict]:
    return [{"from_name": "label", "to_name": "image", "type": "choices", "value": {"choices": [value]}}]


def test_the_project_gets_a_webhook_with_its_secret_header(labeling):
    with server.connect() as client:
        hooks = client.request("GET", "/api/webhooks/", params={"project": labeling.ls_project_id})
    (hook,) = [h for h in hooks if h["project"] == labeling.ls_project_id]
    assert hook["url"] == f"http://portal.test/labeling/webhook/{labeling.pk}"
    assert hook["headers"] == {sync.WEBHOOK_HEADER: sync.webhook_secret(labeling.pk)}
    assert "ANNOTATION_CREATED" in hook["actions"]


def test_a_wrong_or_missing_secret_is_refused_and_nothing_is_queued(labeling):
    url = f"/labeling/webhook/{labeling.pk}"
    assert Client().post(url, {}, content_type="application/json").status_code == 403
    wrong = sync.webhook_secret(labeling.pk + 1)
    response = Client().post(url, {}, content_type="application/json", headers={sync.WEBHOOK_HEADER: wrong})
    assert response.status_code == 403
    assert not PendingTask.objects.filter(name=SYNC).exists()


def test_the_right_secret_is_acknowledged_and_the_sync_queued(labeling):
    headers = {sync.WEBHOOK_HEADER: sync.webhook_secret(labeling.pk)}
    body = {"action": "ANNOTATION_CREATED"}
    response = Client().post(f"/labeling/webhook/{labeling.pk}", body, content_type="application/json", headers=headers)
    assert response.status_code == 200
    (queued,) = PendingTask.objects.filter(name=SYNC)
    assert queued.args == [labeling.pk]


def test_sync_counts_labeled_skipped_annotators_and_agreement(labeling, ls):
    with server.connect() as client:
        first, second, third = sorted(t["id"] for t in client.list_tasks(labeling.ls_project_id))
        for task, result in ((first, "a"), (first, "a"), (second, "b"), (second, "a")):
            client.request("POST", f"/api/tasks/{task}/annotations/", json={"result": choice(result)})
        client.request("POST", f"/api/tasks/{third}/annotations/", json={"result": [], "was_cancelled": True})
    tasks.sync_project(labeling.pk)  # the task body, as the worker runs it
    labeling.refresh_from_db()
    assert labeling.progress == {
        "labeled": 2, "skipped": 1, "total": 3, "annotators": {ls.email: 4}, "agreement": 0.5, "compared_pairs": 2,
    }  # fmt: skip
    assert labeling.synced_at is not None


def test_reconcile_catches_up_and_waits_while_label_studio_is_down(labeling, ls, settings):
    with server.connect() as client:
        task = next(iter(client.list_tasks(labeling.ls_project_id)))["id"]
        client.request("POST", f"/api/tasks/{task}/annotations/", json={"result": choice("b")})
    settings.LABEL_STUDIO_URL = "http://127.0.0.1:9"
    tasks.reconcile()  # down: nothing lost, nothing changed
    assert LabelingProject.objects.get(pk=labeling.pk).progress == {}
    settings.LABEL_STUDIO_URL = ls.url
    tasks.reconcile()
    assert LabelingProject.objects.get(pk=labeling.pk).progress["labeled"] == 1
