"""Annotating through the portal against a real Label Studio: editors annotate as themselves, viewers cannot,
other tenants see nothing; what they submit lands in Label Studio with the right result and counts for them."""

from __future__ import annotations

import pytest
from django.test import Client

from apps.labeling import server, tasks
from apps.labeling.models import Annotation, LabelingTask
from apps.labeling.services import create_labeling_project
from apps.projects.models import Role
from tests import factories
from tests.conftest import user_client
from tests.labeling.conftest import PNG, choice

pytestmark = pytest.mark.django_db
URL = "/api/v1/labeling-projects/"


@pytest.fixture
def viewer(world):
    vera = factories.UserFactory(username="vera")
    factories.add_member(world.project_a, vera, Role.VIEWER)
    return vera


def ls_annotations(labeling) -> dict[int, list[dict]]:
    with server.connect() as client:
        return {t["id"]: t["annotations"] for t in client.list_tasks(labeling.ls_project_id)}


def test_an_editor_annotates_and_label_studio_holds_the_result(world, labeling):
    bob = user_client(world.bob)  # an editor of A: no Label Studio account of his own
    answer = bob.get(f"{URL}{labeling.pk}/next-task/")
    assert answer.status_code == 200, answer.content
    task = answer.json()["task"]
    assert answer.json()["remaining"] == 3
    assert task["data"]["image"].startswith("/labeling/media/")  # on the portal's own origin, signed afresh
    assert b"".join(Client().get(task["data"]["image"]).streaming_content) == PNG
    made = bob.post(f"{URL}{labeling.pk}/annotations/", {"task": task["id"], "result": choice("b")}, format="json")
    assert made.status_code == 201, made.content
    assert made.json()["annotator"] == "bob"
    row = LabelingTask.objects.get(pk=task["id"])
    (annotation,) = ls_annotations(labeling)[row.ls_task_id]
    assert annotation["id"] == made.json()["ls_annotation_id"]
    assert annotation["result"][0]["value"] == {"choices": ["b"]}
    assert not annotation["was_cancelled"]
    assert row.state == "labeled"
    # the next task is another one; sending the same task again updates bob's annotation, never a second one
    assert bob.get(f"{URL}{labeling.pk}/next-task/").json()["task"]["id"] != task["id"]
    again = bob.post(f"{URL}{labeling.pk}/annotations/", {"task": task["id"], "result": choice("a")}, format="json")
    assert again.status_code == 201
    (annotation,) = ls_annotations(labeling)[row.ls_task_id]
    assert annotation["result"][0]["value"] == {"choices": ["a"]}
    shown = bob.get(f"{URL}{labeling.pk}/next-task/", {"task": task["id"]}).json()["task"]
    assert [a["id"] for a in shown["annotations"]] == [annotation["id"]]


def test_progress_counts_portal_users_and_skips(world, labeling):
    first, second, _ = labeling.tasks.order_by("pk")
    user_client(world.bob).post(f"{URL}{labeling.pk}/annotations/", {"task": first.pk, "result": choice("a")},
                                format="json")  # fmt: skip
    user_client(world.alice).post(f"{URL}{labeling.pk}/annotations/", {"task": second.pk, "was_cancelled": True},
                                  format="json")  # fmt: skip
    tasks.sync_project(labeling.pk)
    labeling.refresh_from_db()
    assert labeling.progress["labeled"] == 1
    assert labeling.progress["skipped"] == 1
    assert labeling.progress["annotators"] == {"bob": 1}
    assert list(labeling.tasks.order_by("pk").values_list("state", flat=True)) == ["labeled", "skipped", "todo"]
    assert Annotation.objects.get(task=second).was_cancelled


def test_a_viewer_sees_progress_but_cannot_annotate(world, labeling, viewer):
    client = user_client(viewer)
    task = labeling.tasks.first()
    assert client.get(f"{URL}{labeling.pk}/").status_code == 200
    assert client.get(f"{URL}{labeling.pk}/next-task/").status_code == 403
    answer = client.post(f"{URL}{labeling.pk}/annotations/", {"task": task.pk, "result": choice("a")}, format="json")
    assert answer.status_code == 403
    page = Client()
    page.force_login(viewer)
    assert page.get(f"/p/project-a/labeling/{labeling.pk}/").status_code == 200
    assert page.get(f"/p/project-a/labeling/{labeling.pk}/annotate/").status_code == 403
    assert (
        b"labeling/" + str(labeling.pk).encode() + b"/annotate/"
        not in page.get(f"/p/project-a/labeling/{labeling.pk}/").content
    )
    assert not any(ls_annotations(labeling).values())
    assert not Annotation.objects.exists()


def test_two_tenants_never_reach_each_others_tasks(world, labeling):
    version_b = factories.dataset_version(factories.dataset(world.project_b, world.charlie), {"c.png": PNG})
    mine = create_labeling_project(
        world.project_b, world.charlie, name="b", dataset_version=version_b, kind="image_classification", labels=["x"]
    )
    charlie = user_client(world.charlie)
    task_a = labeling.tasks.first()
    assert charlie.get(f"{URL}{labeling.pk}/next-task/").status_code == 404
    answer = charlie.post(f"{URL}{labeling.pk}/annotations/", {"task": task_a.pk, "result": choice("a")},
                          format="json")  # fmt: skip
    assert answer.status_code == 404
    # a task of project A named through charlie's own labeling project is no task of it
    answer = charlie.post(f"{URL}{mine.pk}/annotations/", {"task": task_a.pk, "result": choice("a")}, format="json")
    assert answer.status_code == 400
    assert "task" in answer.json()
    assert charlie.get(f"{URL}{mine.pk}/next-task/", {"task": task_a.pk}).status_code == 400
    page = Client()
    page.force_login(world.charlie)
    assert page.get(f"/p/project-a/labeling/{labeling.pk}/annotate/").status_code == 404
    assert page.get(f"/p/project-b/labeling/{labeling.pk}/annotate/").status_code == 404
    assert not any(ls_annotations(labeling).values())
    # Label Studio holds both projects, but no portal member has an account there: only the portal's token
    assert charlie.get(f"{URL}{mine.pk}/next-task/").json()["task"]["data"]["image"].startswith("/labeling/media/")


def test_bad_annotations_are_400_by_field_and_nothing_is_written(world, labeling):
    bob = user_client(world.bob)
    task = labeling.tasks.first()
    save = f"{URL}{labeling.pk}/annotations/"
    cases = [
        ({"task": task.pk, "result": "b"}, "result"),
        ({"task": task.pk, "result": []}, "result"),
        (
            {
                "task": task.pk,
                "result": [{"from_name": "nope", "to_name": "image", "type": "choices", "value": {"choices": ["a"]}}],
            },
            "result",
        ),
        ({"task": task.pk, "result": [{"from_name": "label"}]}, "result"),
        ({"task": 10**9, "result": choice("a")}, "task"),
        ({"task": "x", "result": choice("a")}, "task"),
        ({"task": task.pk, "result": choice("a"), "lead_time": -1}, "lead_time"),
        ({"task": task.pk, "result": choice("a"), "who": "alice"}, "who"),
    ]
    for payload, field in cases:
        answer = bob.post(save, payload, format="json")
        assert answer.status_code == 400, (payload, answer.content)
        assert field in answer.json(), (payload, answer.json())
    assert bob.get(f"{URL}{labeling.pk}/next-task/", {"task": "x"}).status_code == 400
    assert not any(ls_annotations(labeling).values())
    assert not Annotation.objects.exists()


def test_label_studio_down_is_a_503_and_nothing_is_recorded(world, labeling, settings):
    settings.LABEL_STUDIO_URL = "http://127.0.0.1:9"
    task = labeling.tasks.first()
    bob = user_client(world.bob)
    answer = bob.post(f"{URL}{labeling.pk}/annotations/", {"task": task.pk, "result": choice("a")}, format="json")
    assert answer.status_code == 503
    assert "cannot be reached" in answer.json()["detail"]
    assert bob.get(f"{URL}{labeling.pk}/next-task/").status_code == 503
    assert not Annotation.objects.exists()
    task.refresh_from_db()
    assert task.state == "todo"


def test_the_annotate_page_carries_the_config_and_the_api(world, labeling):
    page = Client()
    page.force_login(world.bob)
    answer = page.get(f"/p/project-a/labeling/{labeling.pk}/annotate/")
    assert answer.status_code == 200
    body = answer.content.decode()
    assert "vendor/label-studio/main.js" in body
    assert f"/api/v1/labeling-projects/{labeling.pk}/annotations/" in body
    assert 'data-live="labeling:' in body
    detail = page.get(f"/p/project-a/labeling/{labeling.pk}/").content.decode()
    assert f"/p/project-a/labeling/{labeling.pk}/annotate/" in detail
