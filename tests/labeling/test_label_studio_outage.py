"""Label Studio down → a clear error and nothing lost: the session's real Label Studio process is stopped and started
again (same data folder, port and token) while the portal keeps working; the reconcile catches up afterwards.

An annotation made in Label Studio whose webhook never reached the portal (its webhook URL, http://portal.test, goes
nowhere) is what a lost event looks like; the portal's own annotate API during the outage answers 503 and records
nothing; once Label Studio is back, the reconcile reads both the lost annotation and the one submitted again.
"""

from __future__ import annotations

import pytest
from django.test import Client

from apps.labeling import server, tasks
from apps.labeling.models import Annotation, LabelingProject
from tests.conftest import user_client
from tests.labeling.conftest import choice

pytestmark = pytest.mark.django_db
URL = "/api/v1/labeling-projects/"


def test_label_studio_stopped_then_started_again_loses_nothing(world, labeling, ls):
    first, second = labeling.tasks.order_by("pk")[:2]
    with server.connect() as client:  # made in Label Studio; its webhook to the portal fails
        client.request("POST", f"/api/tasks/{first.ls_task_id}/annotations/", json={"result": choice("b")})
    bob = user_client(world.bob)
    body = {"task": second.pk, "result": choice("a")}

    ls.stop()  # the real process
    try:
        answer = bob.post(f"{URL}{labeling.pk}/annotations/", body, format="json")
        assert answer.status_code == 503
        assert "cannot be reached" in answer.json()["detail"]
        assert bob.get(f"{URL}{labeling.pk}/next-task/").status_code == 503
        assert not Annotation.objects.exists()
        second.refresh_from_db()
        assert second.state == "todo"
        state = Client().get("/readyz").json()["labelstudio"]
        assert state["ok"] is False
        assert "down or starting" in state["detail"]
        tasks.reconcile()  # waits for the next pass, raising nothing
        assert LabelingProject.objects.get(pk=labeling.pk).progress == {}
        page = Client()
        page.force_login(world.bob)
        assert (
            "Label Studio is not available right now"
            in page.get(f"/p/project-a/labeling/{labeling.pk}/").content.decode()
        )
        assert page.get("/p/project-a/").status_code == 200  # the rest of the portal keeps working
    finally:
        ls.start()

    tasks.reconcile()  # the annotation whose webhook was lost is read back
    progress = LabelingProject.objects.get(pk=labeling.pk).progress
    assert (progress["labeled"], progress["total"], progress["annotators"]) == (1, 3, {ls.email: 1})
    first.refresh_from_db()
    assert first.state == "labeled"

    answer = bob.post(f"{URL}{labeling.pk}/annotations/", body, format="json")  # submitted again: it lands
    assert answer.status_code == 201, answer.content
    tasks.reconcile()
    progress = LabelingProject.objects.get(pk=labeling.pk).progress
    assert (progress["labeled"], progress["annotators"]) == (2, {"bob": 1, ls.email: 1})
    with server.connect() as client:
        stored = {t["id"]: t["annotations"] for t in client.list_tasks(labeling.ls_project_id)}
    assert [a["result"][0]["value"] for a in stored[first.ls_task_id]] == [{"choices": ["b"]}]
    assert [a["result"][0]["value"] for a in stored[second.ls_task_id]] == [{"choices": ["a"]}]
