"""/api/v1/apps/ (the catalogue) and /api/v1/installations/ (install, list, uninstall)."""

from __future__ import annotations

import io

import pytest

from apps.appstore import bundle as bundles
from apps.appstore.bundle import builtin_folders
from apps.appstore.models import Installation
from apps.appstore.services import add_version
from apps.datasets.models import Dataset
from apps.jobs.models import Pipeline
from tests.appstore.factories import builtin_version, tiny_bundle
from tests.conftest import user_client

pytestmark = pytest.mark.django_db


def test_the_catalogue_lists_builtin_apps_and_a_projects_own_only_to_its_members(world):
    builtin_version()
    private = add_version(tiny_bundle(), project=world.project_b).app

    mine = {a["name"]: a for a in user_client(world.alice).get("/api/v1/apps/").json()["results"]}
    assert "tiny" not in mine
    assert set(mine) == {folder.name for folder in builtin_folders()}
    assert mine["tabular-classification"]["latest"]["title"] == "Tabular classification"
    assert mine["tabular-classification"]["latest"]["category"] == "classification"
    assert user_client(world.alice).get(f"/api/v1/apps/{private.pk}/").status_code == 404
    theirs = user_client(world.charlie).get("/api/v1/apps/").json()["results"]
    assert {a["name"] for a in theirs} == set(mine) | {"tiny"}


def test_search_and_filters(world):
    builtin_version()
    add_version(tiny_bundle(), project=world.project_a)
    client = user_client(world.alice)
    assert [a["name"] for a in client.get("/api/v1/apps/?q=classifier").json()["results"]] == [
        "tabular-classification",
        "tune-tabular",
    ]
    assert [a["name"] for a in client.get("/api/v1/apps/?tag=test").json()["results"]] == ["tiny"]
    assert [a["name"] for a in client.get("/api/v1/apps/?category=classification").json()["results"]] == [
        "image-classification",
        "tabular-classification",
        "text-classification",
    ]


def test_versions_say_what_they_create_and_the_bundle_downloads_with_its_digest(world):
    version = builtin_version()
    client = user_client(world.alice)
    [listed] = client.get(f"/api/v1/apps/{version.app_id}/versions/").json()
    assert listed["version"] == "1.0.0"
    assert "Pipeline “tabular-classification” (5 steps)" in [c["description"] for c in listed["creates"]]
    response = client.get(f"/api/v1/apps/{version.app_id}/bundle/")
    assert response.status_code == 200
    data = b"".join(response.streaming_content) if response.streaming else response.content
    assert response["Digest"] == f"sha-256={bundles.digest(data)}" == f"sha-256={version.digest}"
    assert bundles.load_zip(io.BytesIO(data).getvalue()).manifest == version.manifest


def test_install_and_uninstall_through_the_api(world):
    builtin_version()
    client = user_client(world.bob)  # an editor
    response = client.post(
        "/api/v1/installations/",
        {"project": "project-a", "app": "tabular-classification", "name": "flowers",
         "parameters": {"model": "random_forest"}},
        format="json",
    )  # fmt: skip
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["app_name"], body["app_version_number"], body["name"]) == (
        "tabular-classification",
        "1.0.0",
        "flowers",
    )
    assert [(o["kind"], o["name"]) for o in body["created"]][3] == ("pipelines", "flowers")

    again = client.post("/api/v1/installations/", {"project": "project-a", "app": "tabular-classification",
                                                   "name": "flowers"}, format="json")  # fmt: skip
    assert again.status_code == 400
    assert "installed in this project already" in again.json()["name"][0]

    assert client.delete(f"/api/v1/installations/{body['id']}/").status_code == 204
    assert not Installation.objects.exists()
    assert not Pipeline.objects.exists()
    assert Dataset.objects.count() == 2  # data kept


def test_field_errors_come_back_as_400(world):
    builtin_version()
    response = user_client(world.alice).post(
        "/api/v1/installations/",
        {"project": "project-a", "app": "tabular-classification", "parameters": {"min_accuracy": "high"}},
        format="json",
    )
    assert response.status_code == 400
    assert list(response.json()) == ["parameters.min_accuracy"]
    missing = user_client(world.alice).post(
        "/api/v1/installations/", {"project": "project-a", "app": "nope"}, format="json"
    )
    assert (missing.status_code, missing.json()) == (400, {"app": ["No app “nope” in the catalogue."]})


def test_an_outsider_cannot_install_into_a_project_or_see_its_installations(world):
    builtin_version()
    response = user_client(world.charlie).post(
        "/api/v1/installations/", {"project": "project-a", "app": "tabular-classification"}, format="json"
    )
    assert response.status_code == 400  # the project is not visible to charlie: as if it did not exist
    assert "project" in response.json()


def test_a_project_admin_uploads_a_bundle_zip_and_a_broken_one_is_refused_with_field_errors(world):
    from django.core.files.uploadedfile import SimpleUploadedFile

    data = tiny_bundle().to_zip()
    upload = {"project": "project-a", "bundle": SimpleUploadedFile("tiny.zip", data, "application/zip")}
    assert user_client(world.bob).post("/api/v1/apps/upload/", upload, format="multipart").status_code == 403

    upload["bundle"] = SimpleUploadedFile("tiny.zip", data, "application/zip")
    response = user_client(world.alice).post("/api/v1/apps/upload/", upload, format="multipart")
    assert response.status_code == 201, response.content
    assert (response.json()["version"], response.json()["digest"]) == ("1.0.0", bundles.digest(data))
    assert user_client(world.charlie).get("/api/v1/apps/?q=tiny").json()["results"] == []  # the project's own

    broken = tiny_bundle()
    broken.manifest["spec"]["pipelines"][0]["nodes"][0]["template"] = "nope"
    broken.manifest["metadata"]["version"] = "2.0.0"
    upload["bundle"] = SimpleUploadedFile("broken.zip", broken.to_zip(), "application/zip")
    refused = user_client(world.alice).post("/api/v1/apps/upload/", upload, format="multipart")
    assert refused.status_code == 400
    assert list(refused.json()) == ["spec.pipelines[0].nodes[0].template"]
    upload["bundle"] = SimpleUploadedFile("x.zip", b"not a zip", "application/zip")
    assert user_client(world.alice).post("/api/v1/apps/upload/", upload, format="multipart").json() == {
        "bundle": ["Not a zip file."]
    }
