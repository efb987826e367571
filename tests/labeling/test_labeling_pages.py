"""Labeling pages: list, form, detail with progress; Label Studio down is said plainly and nothing breaks."""

from __future__ import annotations

import pytest
from django.test import Client

from apps.labeling.models import LabelingProject
from apps.projects.models import Role
from tests import factories

pytestmark = pytest.mark.django_db
PNG = b"\x89PNG\r\n\x1a\n"


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def version(world):
    return factories.dataset_version(factories.dataset(world.project_a, world.alice, name="pics"), {"a.png": PNG})


def test_an_editor_creates_through_the_form_and_sees_the_project(world, ls, version):
    client = signed_in(world.bob)
    form = {"name": "pics", "dataset_version": version.pk, "kind": "image_classification", "labels": "cat\ndog\n"}
    response = client.post("/p/project-a/labeling/new/", form)
    row = LabelingProject.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/p/project-a/labeling/{row.pk}/"
    page = client.get(response["Location"]).content.decode()
    assert "cat, dog" in page
    assert "1 tasks; no progress read back" in page
    listing = client.get("/p/project-a/labeling/").content.decode()
    assert "pics@1" in listing
    assert "Label Studio is not available" not in listing


def test_form_errors_come_from_the_service(world, ls, version):
    form = {"name": "x", "dataset_version": version.pk, "kind": "object_detection", "labels": ""}
    response = signed_in(world.alice).post("/p/project-a/labeling/new/", form)
    assert response.status_code == 400
    assert "Give at least one label." in response.content.decode()


def test_label_studio_down_is_said_on_the_pages_and_nothing_is_written(world, settings, version):
    settings.LABELING, settings.LABEL_STUDIO_URL, settings.LABEL_STUDIO_TOKEN = "on", "http://127.0.0.1:9", "x"
    client = signed_in(world.alice)
    listing = client.get("/p/project-a/labeling/")
    assert listing.status_code == 200
    assert "Label Studio is not available right now" in listing.content.decode()
    form = {"name": "p", "dataset_version": version.pk, "kind": "image_classification", "labels": "a"}
    response = client.post("/p/project-a/labeling/new/", form)
    assert response.status_code == 503
    assert "cannot be reached" in response.content.decode()
    assert not LabelingProject.objects.exists()
    assert client.get("/p/project-a/datasets/").status_code == 200  # the rest of the portal works on


def test_a_viewer_sees_but_cannot_create_and_an_outsider_sees_nothing(world, settings, version):
    settings.LABEL_STUDIO_URL, settings.LABEL_STUDIO_TOKEN = "http://127.0.0.1:9", "x"
    row = LabelingProject.objects.create(
        project=world.project_a, name="seen", dataset_version=version, kind="ner", label_config="<View/>"
    )
    viewer = factories.UserFactory(username="vic")
    factories.add_member(world.project_a, viewer, Role.VIEWER)
    assert "seen" in signed_in(viewer).get("/p/project-a/labeling/").content.decode()
    assert signed_in(viewer).get(f"/p/project-a/labeling/{row.pk}/").status_code == 200
    assert signed_in(viewer).get("/p/project-a/labeling/new/").status_code == 403
    assert signed_in(viewer).post(f"/p/project-a/labeling/{row.pk}/export/").status_code == 403
    assert signed_in(world.charlie).get(f"/p/project-a/labeling/{row.pk}/").status_code == 404
    assert signed_in(world.charlie).get(f"/p/project-b/labeling/{row.pk}/").status_code == 404
