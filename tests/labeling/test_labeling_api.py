"""/api/v1/labeling-projects/: editors create, viewers read, other tenants see nothing; Label Studio down → 503."""

from __future__ import annotations

import pytest

from apps.labeling import server
from apps.labeling.models import LabelingProject
from apps.projects.models import Role
from tests import factories
from tests.conftest import user_client

pytestmark = pytest.mark.django_db
URL = "/api/v1/labeling-projects/"
PNG = b"\x89PNG\r\n\x1a\n"


def body(version, **extra):
    return {"project": "project-a", "name": "digits", "dataset_version": version.pk, "kind": "image_classification",
            "labels": ["0", "1"], **extra}  # fmt: skip


@pytest.fixture
def version(world):
    return factories.dataset_version(factories.dataset(world.project_a, world.alice), {"a.png": PNG, "b.png": PNG})


def test_an_editor_creates_and_a_viewer_reads_but_cannot_create(world, ls, version):
    response = user_client(world.bob).post(URL, body(version), format="json")  # bob is an editor of A
    assert response.status_code == 201, response.content
    assert response.json()["task_count"] == 2
    assert response.json()["status"] == "ready"
    viewer = factories.UserFactory(username="vera")
    factories.add_member(world.project_a, viewer, Role.VIEWER)
    client = user_client(viewer)
    assert [p["name"] for p in client.get(URL).json()["results"]] == ["digits"]
    assert client.post(URL, body(version, name="other"), format="json").status_code == 403


def test_two_tenants_never_see_each_other(world, ls, version):
    created = user_client(world.alice).post(URL, body(version), format="json").json()
    version_b = factories.dataset_version(factories.dataset(world.project_b, world.charlie), {"c.png": PNG})
    payload_b = {**body(version_b), "project": "project-b", "name": "b-only"}
    assert user_client(world.charlie).post(URL, payload_b, format="json").status_code == 201
    charlie = user_client(world.charlie)
    assert [p["name"] for p in charlie.get(URL).json()["results"]] == ["b-only"]
    assert charlie.get(f"{URL}{created['id']}/").status_code == 404
    assert charlie.delete(f"{URL}{created['id']}/").status_code == 404
    # a version of project A named from project B is refused like one that does not exist
    stolen = {**body(version), "project": "project-b", "name": "stolen"}
    response = charlie.post(URL, stolen, format="json")
    assert response.status_code == 400
    assert "dataset_version" in response.json()


def test_bad_input_is_a_400_by_field(world, ls, version):
    response = user_client(world.alice).post(URL, body(version, labels=[]), format="json")
    assert response.status_code == 400
    assert "labels" in response.json()
    response = user_client(world.alice).post(
        URL, body(version, kind="xml", label_config="<View><Nope/>"), format="json"
    )
    assert response.status_code == 400
    assert "label_config" in response.json()
    assert not LabelingProject.objects.exists()


def test_label_studio_down_is_a_503_saying_so(world, settings, version):
    settings.LABELING, settings.LABEL_STUDIO_URL, settings.LABEL_STUDIO_TOKEN = "on", "http://127.0.0.1:9", "x"
    response = user_client(world.alice).post(URL, body(version), format="json")
    assert response.status_code == 503
    assert "cannot be reached" in response.json()["detail"]
    assert not LabelingProject.objects.exists()


def test_delete_removes_the_label_studio_project(world, ls, version):
    created = user_client(world.alice).post(URL, body(version), format="json").json()
    assert user_client(world.alice).delete(f"{URL}{created['id']}/").status_code == 204
    with server.connect() as client:
        assert created["ls_project_id"] not in {p["id"] for p in client.list_projects()}
