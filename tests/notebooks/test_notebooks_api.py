"""/api/v1/notebooks/: members list, the owner acts, admins may stop or delete, outsiders get 404, bad input 400."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from apps.notebooks.models import Notebook
from apps.projects.models import Role
from tests.conftest import user_client
from tests.factories import UserFactory, add_member
from tests.notebooks.factories import heartbeat_agent, notebook

URL = "/api/v1/notebooks/"


@pytest.fixture(autouse=True)
def _work_dir(tmp_path, settings):
    settings.PORTAL_WORK_DIR = tmp_path / "work"


def test_a_member_creates_a_stopped_notebook(world):
    response = user_client(world.bob).post(
        URL, {"project": "project-a", "name": "eda", "cpu": "0.5", "memory": "1Gi", "idle_timeout": 20}, format="json"
    )

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["owner"] == "bob"
    assert body["status"] == "stopped"
    assert (body["cpu"], body["memory_bytes"], body["idle_timeout"], body["effective_idle_timeout"]) == (
        0.5,
        2**30,
        20,
        20,
    )
    assert body["open_url"] is None
    assert "token" not in body
    assert "upstream" not in body


def test_bad_input_is_400_with_field_messages(world):
    response = user_client(world.bob).post(
        URL,
        {"project": "project-a", "name": "Not A Slug", "cpu": "-1", "memory": "lots", "gpu": "x", "ide": "vscode"},
        format="json",
    )

    assert response.status_code == 400
    assert set(response.json()) == {"name", "cpu", "memory", "gpu", "ide"}


def test_viewers_cannot_create_and_outsiders_cannot_name_the_project(world):
    viewer = UserFactory(username="vera")
    add_member(world.project_a, viewer, Role.VIEWER)

    assert user_client(viewer).post(URL, {"project": "project-a", "name": "x"}, format="json").status_code == 403
    response = user_client(world.charlie).post(URL, {"project": "project-a", "name": "x"}, format="json")
    assert response.status_code == 400
    assert "project" in response.json()


def test_members_list_the_projects_notebooks_filtered_by_project(world):
    notebook(world.project_a, world.alice)
    notebook(world.project_b, world.charlie)

    rows = user_client(world.bob).get(URL, {"project": "project-a"}).json()["results"]
    assert [(r["name"], r["owner"]) for r in rows] == [("eda", "alice")]
    assert user_client(world.bob).get(URL, {"project": "project-b"}).json()["results"] == []


def test_only_the_owner_starts_and_changes_a_notebook(world):
    heartbeat_agent()
    alices = notebook(world.project_a, world.alice)
    bob = user_client(world.bob)

    assert bob.post(f"{URL}{alices.pk}/start/").status_code == 403
    assert bob.post(f"{URL}{alices.pk}/restart/").status_code == 403
    assert bob.patch(f"{URL}{alices.pk}/", {"idle_timeout": 5}, format="json").status_code == 403
    assert bob.post(f"{URL}{alices.pk}/stop/").status_code == 403
    assert bob.delete(f"{URL}{alices.pk}/").status_code == 403
    alices.refresh_from_db()
    assert alices.status == Notebook.Status.STOPPED

    started = user_client(world.alice).post(f"{URL}{alices.pk}/start/")
    assert started.status_code == 200, started.content
    assert started.json()["status"] == "starting"


def test_a_project_admin_may_stop_and_delete_someone_elses_notebook(world):
    heartbeat_agent()
    bobs = notebook(world.project_a, world.bob)
    assert user_client(world.bob).post(f"{URL}{bobs.pk}/start/").json()["status"] == "starting"
    alice = user_client(world.alice)  # the project's owner: an admin and more

    assert alice.post(f"{URL}{bobs.pk}/start/").status_code == 403  # not hers to open or start
    stopped = alice.post(f"{URL}{bobs.pk}/stop/")
    assert stopped.status_code == 200
    assert stopped.json()["status"] == "stopped"
    assert alice.delete(f"{URL}{bobs.pk}/").status_code == 204
    assert not Notebook.objects.filter(pk=bobs.pk).exists()


def test_starting_without_a_runtime_is_400_saying_why(world):
    mine = notebook(world.project_a, world.bob)

    response = user_client(world.bob).post(f"{URL}{mine.pk}/start/")
    assert response.status_code == 400
    assert "no agent is running" in response.json()["non_field_errors"][0]


def test_the_owner_changes_settings_and_bad_values_are_400(world):
    mine = notebook(world.project_a, world.bob)
    bob = user_client(world.bob)

    changed = bob.patch(f"{URL}{mine.pk}/", {"idle_timeout": 15, "memory": "1Gi", "name": "renamed"}, format="json")
    assert changed.status_code == 200, changed.content
    assert (changed.json()["idle_timeout"], changed.json()["memory_bytes"], changed.json()["name"]) == (
        15,
        2**30,
        "eda",
    )
    bad = bob.patch(f"{URL}{mine.pk}/", {"idle_timeout": 0, "cpu": "many"}, format="json")
    assert bad.status_code == 400
    assert set(bad.json()) == {"idle_timeout", "cpu"}


def test_outsiders_get_404_and_anonymous_401(world):
    mine = notebook(world.project_a, world.bob)

    assert user_client(world.charlie).get(f"{URL}{mine.pk}/").status_code == 404
    assert user_client(world.charlie).post(f"{URL}{mine.pk}/stop/").status_code == 404
    assert APIClient().get(URL).status_code == 401


def test_the_project_default_idle_timeout_is_a_project_setting(world):
    alice = user_client(world.alice)

    response = alice.patch("/api/v1/projects/project-a/", {"notebook_idle_timeout": 45}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["notebook_idle_timeout"] == 45
    assert alice.patch("/api/v1/projects/project-a/", {"notebook_idle_timeout": 0}, format="json").status_code == 400
    notebook(world.project_a, world.bob)
    assert user_client(world.bob).get(URL).json()["results"][0]["effective_idle_timeout"] == 45


# --- numbers past their columns (issue 27: gpu 1000 overflowed the decimal column, a 500) -----------------------


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("gpu", 1000, "Give a number from 0 to 999."),
        ("gpu", "1e9", "Give a number from 0 to 999."),
        ("cpu", 1001, "Give a number from 0.1 to 1000."),
        ("cpu", "NaN", "Give a number from 0.1 to 1000."),
        ("cpu", "Infinity", "Give a number."),
        ("memory", 2**55, "Give at most 1Pi."),
        ("memory", 2**80, "Give a size such as 512Mi, 4Gi or a number of bytes."),
    ],
)
def test_an_amount_past_its_column_is_a_400_naming_the_field(world, field, value, message):
    body = {"project": "project-a", "name": "big", field: value}

    response = user_client(world.alice).post(URL, body, format="json")

    assert response.status_code == 400, response.content
    assert response.json() == {field: [message]}
    assert not Notebook.objects.exists()


def test_an_idle_timeout_past_its_column_is_a_400(world):
    body = {"project": "project-a", "name": "big", "idle_timeout": 2**63}

    response = user_client(world.alice).post(URL, body, format="json")

    assert response.status_code == 400
    assert list(response.json()) == ["idle_timeout"]
