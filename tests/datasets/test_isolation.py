"""A non-member gets 404 for another project's datasets, versions, files, previews and downloads."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.datasets.models import Dataset, DatasetVersion
from tests.conftest import token_client, user_client
from tests.datasets.helpers import start
from tests.factories import dataset, dataset_version, upload_session

pytestmark = pytest.mark.smoke


@pytest.fixture
def secret(world):
    return dataset_version(dataset(world.project_a, world.alice, name="secret"), {"s.csv": b"a\n1\n", "i.png": b"x"})


def test_the_api_answers_404_to_outsiders(world, secret):
    client = user_client(world.charlie)
    v, d = secret.pk, secret.dataset_id
    for url in [
        f"/api/v1/datasets/{d}/",
        f"/api/v1/datasets/{d}/lineage/",
        f"/api/v1/dataset-versions/{v}/",
        f"/api/v1/dataset-versions/{v}/files/",
        f"/api/v1/dataset-versions/{v}/preview/?path=s.csv",
        f"/api/v1/dataset-versions/{v}/stats/",
        f"/api/v1/dataset-versions/{v}/diff/",
        f"/api/v1/dataset-versions/{v}/download/",
        f"/api/v1/dataset-versions/{v}/download/?path=s.csv",
        f"/api/v1/dataset-versions/{v}/thumbnail/?path=i.png",
        f"/api/v1/dataset-versions/{v}/lineage/",
    ]:
        assert client.get(url).status_code == 404, url
    assert client.delete(f"/api/v1/dataset-versions/{v}/").status_code == 404
    assert client.delete(f"/api/v1/datasets/{d}/").status_code == 404
    assert DatasetVersion.objects.filter(pk=v).exists()
    assert client.get("/api/v1/datasets/").json()["results"] == []
    assert client.get("/api/v1/dataset-versions/").json()["results"] == []


def test_outsiders_cannot_upload_into_another_projects_dataset(world, secret):
    client = user_client(world.charlie)
    response = start(client, world.project_b, secret.dataset)  # their own project slug, our dataset id
    assert response.status_code == 400
    assert "dataset" in response.json()
    session = upload_session(secret.dataset, world.alice)
    upload = session.files.create(path="a.txt", size=3)
    assert client.get(f"/api/v1/dataset-uploads/{session.pk}/").status_code == 404
    assert client.post(f"/api/v1/dataset-uploads/{session.pk}/commit/", {}, format="json").status_code == 404
    assert client.head(f"/api/v1/dataset-upload-files/{upload.pk}/").status_code == 404
    assert (
        client.generic(
            "PATCH", f"/api/v1/dataset-upload-files/{upload.pk}/", b"abc",
            content_type="application/offset+octet-stream", HTTP_UPLOAD_OFFSET="0",
        ).status_code
        == 404
    )  # fmt: skip


def test_a_project_token_sees_only_its_project(world, secret):
    theirs = dataset_version(dataset(world.project_b, world.charlie, name="theirs"))
    client = token_client(world.charlie, project=world.project_b)
    assert client.get(f"/api/v1/dataset-versions/{secret.pk}/").status_code == 404
    assert client.get(f"/api/v1/dataset-versions/{theirs.pk}/").status_code == 200


def test_pages_answer_404_to_outsiders(world, secret, client):
    client.force_login(world.charlie)
    kw = {"project": world.project_a.slug}
    urls = [reverse("datasets:dataset-list", kwargs=kw), reverse("datasets:dataset-create", kwargs=kw)]
    urls += [reverse(f"datasets:dataset-{n}", kwargs={**kw, "pk": secret.dataset_id}) for n in ("detail", "upload")]
    urls += [
        reverse(f"datasets:version-{n}", kwargs={**kw, "pk": secret.pk}) + q
        for n, q in [
            ("detail", ""),
            ("preview", "?path=s.csv"),
            ("diff", ""),
            ("download", ""),
            ("download", "?path=s.csv"),
        ]
    ]
    for url in urls:
        assert client.get(url).status_code == 404, url
    assert client.post(reverse("datasets:version-delete", kwargs={**kw, "pk": secret.pk})).status_code == 404
    # and with their own project's slug in the URL, our objects are still not found
    own = {"project": world.project_b.slug, "pk": secret.pk}
    assert client.get(reverse("datasets:version-download", kwargs=own)).status_code == 404
    assert Dataset.objects.filter(pk=secret.dataset_id).exists()
