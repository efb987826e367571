"""/api/v1/dataset-uploads/: which dataset a session writes to (by name in the named project, or by id, never in
another project than the one named), and what committing unchanged content answers."""

from __future__ import annotations

from apps.datasets.models import DatasetVersion, UploadSession, UploadStatus
from apps.projects.models import Role
from tests.conftest import user_client
from tests.datasets.helpers import announce, send, upload_version
from tests.factories import add_member, dataset

URL = "/api/v1/dataset-uploads/"


def test_a_session_takes_the_dataset_by_name_within_the_project(world):
    ds = dataset(world.project_a, world.alice, name="iris")
    dataset(world.project_b, world.charlie, name="iris")  # the same name elsewhere is not it

    response = user_client(world.alice).post(URL, {"project": "project-a", "dataset": "iris"}, format="json")

    assert response.status_code == 201, response.content
    assert (response.json()["project"], response.json()["dataset"]) == ("project-a", ds.pk)
    assert UploadSession.objects.get(pk=response.json()["id"]).dataset == ds


def test_a_dataset_of_another_project_than_the_one_named_is_refused(world):
    """It made the session in the dataset's project (demo) though the body named qa."""
    qa, demo = world.project_a, world.project_b
    add_member(demo, world.alice, Role.EDITOR)  # alice may write in both projects
    theirs = dataset(demo, world.charlie, name="demo-data")

    response = user_client(world.alice).post(URL, {"project": qa.slug, "dataset": theirs.pk}, format="json")

    assert response.status_code == 400
    assert demo.slug in response.json()["dataset"][0]
    assert not UploadSession.objects.exists()


def test_an_unknown_name_in_the_project_is_a_400_naming_both(world):
    dataset(world.project_b, world.charlie, name="secret")

    response = user_client(world.alice).post(URL, {"project": "project-a", "dataset": "secret"}, format="json")

    assert response.status_code == 400
    assert response.json() == {"dataset": ["No dataset “secret” in project “project-a” that you can access."]}


def test_a_name_without_a_project_asks_for_the_project(world):
    dataset(world.project_a, world.alice, name="iris")

    response = user_client(world.alice).post(URL, {"dataset": "iris"}, format="json")

    assert response.status_code == 400
    assert list(response.json()) == ["project"]


def test_an_id_alone_still_works_in_the_datasets_project(world):
    ds = dataset(world.project_a, world.alice, name="iris")

    response = user_client(world.alice).post(URL, {"dataset": ds.pk}, format="multipart")

    assert response.status_code == 201, response.content
    assert response.json()["project"] == "project-a"


def test_committing_the_latest_versions_content_again_makes_no_new_version(world):
    client = user_client(world.alice)
    ds = dataset(world.project_a, world.alice, name="iris")
    first = upload_version(client, world.project_a, ds, {"a.csv": b"x,y\n1,2\n"})
    assert first["created"] is True

    session = client.post(URL, {"project": "project-a", "dataset": "iris", "message": "again"}, format="json").json()
    send(client, announce(client, session["id"], "a.csv", b"x,y\n1,2\n").json()["id"], b"x,y\n1,2\n")
    response = client.post(f"{URL}{session['id']}/commit/", {}, format="json")

    assert response.status_code == 200, response.content
    assert (response.json()["id"], response.json()["number"], response.json()["created"]) == (first["id"], 1, False)
    assert DatasetVersion.objects.filter(dataset=ds).count() == 1
    closed = UploadSession.objects.get(pk=session["id"])
    assert (closed.status, closed.version_id) == (UploadStatus.COMMITTED, first["id"])


def test_changed_content_makes_the_next_version(world):
    client = user_client(world.alice)
    ds = dataset(world.project_a, world.alice, name="iris")
    upload_version(client, world.project_a, ds, {"a.csv": b"1\n"})

    second = upload_version(client, world.project_a, ds, {"a.csv": b"2\n"})

    assert (second["number"], second["created"]) == (2, True)
