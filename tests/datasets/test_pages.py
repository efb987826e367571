"""The dataset pages render what the services computed."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.datasets.models import Dataset
from apps.datasets.services import record_usage
from apps.datasets.tasks import analyze_version
from tests.access import make_run
from tests.factories import dataset, dataset_version


@pytest.fixture
def versions(world):
    ds = dataset(world.project_a, world.alice, description="Fisher's iris", tags=["tabular"])
    v1 = dataset_version(ds, {"iris.csv": b"a,b\n1,2\n", "w.xyz": b"?"}, message="first")
    v2 = dataset_version(ds, {"iris.csv": b"a,b,c\n1,2,3\n4,5,6\n"}, message="derived column")
    for v in (v1, v2):
        analyze_version(v.pk)
    record_usage(v2, pipeline_run=make_run(world.project_a, world.alice))
    return v1, v2


@pytest.mark.smoke
def test_list_and_detail_show_versions_and_lineage(world, client, versions):
    v1, _v2 = versions
    client.force_login(world.bob)
    listing = client.get(reverse("datasets:dataset-list", kwargs={"project": "project-a"}))
    assert b"iris" in listing.content
    assert b"v2" in listing.content
    detail = client.get(reverse("datasets:dataset-detail", kwargs={"project": "project-a", "pk": v1.dataset_id}))
    html = detail.content.decode()
    assert "derived column" in html
    assert 'id="lineage"' in html
    assert "pipe #" in html
    assert "iris@latest" in html


def test_version_page_lists_files_and_statistics(world, client, versions):
    _v1, v2 = versions
    client.force_login(world.alice)
    html = client.get(reverse("datasets:version-detail", kwargs={"project": "project-a", "pk": v2.pk})).content.decode()
    assert "iris.csv" in html
    assert "2 rows" in html
    assert v2.digest in html


def test_preview_partial_and_no_preview_message(world, client, versions):
    v1, _v2 = versions
    client.force_login(world.alice)
    url = reverse("datasets:version-preview", kwargs={"project": "project-a", "pk": v1.pk})
    table = client.get(url + "?path=iris.csv", HTTP_HX_REQUEST="true")
    assert "<table" in table.content.decode()
    assert b"<html" not in table.content
    none = client.get(url + "?path=w.xyz")
    assert "No preview for .xyz files" in none.content.decode()


def test_a_nul_in_the_preview_path_is_a_400_not_a_500(world, client, versions):
    v1, _v2 = versions
    client.force_login(world.alice)
    url = reverse("datasets:version-preview", kwargs={"project": "project-a", "pk": v1.pk})

    response = client.get(url + "?path=iris.csv%00")

    assert response.status_code == 400
    assert "NUL" in response.content.decode()


def test_diff_page(world, client, versions):
    _v1, v2 = versions
    client.force_login(world.alice)
    html = client.get(reverse("datasets:version-diff", kwargs={"project": "project-a", "pk": v2.pk})).content.decode()
    assert "files removed" in html
    assert "w.xyz" in html
    assert "+1" in html


def test_create_page_makes_a_dataset_and_sends_you_to_upload(world, client):
    client.force_login(world.bob)
    response = client.post(
        reverse("datasets:dataset-create", kwargs={"project": "project-a"}),
        {"name": "mnist", "description": "digits", "tags": "images, small", "licence": "CC-BY", "source": ""},
    )
    ds = Dataset.objects.get(name="mnist")
    assert response.status_code == 302
    assert response["Location"] == reverse("datasets:dataset-upload", kwargs={"project": "project-a", "pk": ds.pk})
    assert ds.tags == ["images", "small"]
    upload = client.get(response["Location"]).content.decode()
    assert "/api/v1/dataset-uploads/" in upload
    duplicate = client.post(reverse("datasets:dataset-create", kwargs={"project": "project-a"}), {"name": "mnist"})
    assert duplicate.status_code == 400
    assert "exists in this project" in duplicate.content.decode()


def test_deleting_a_used_version_from_the_page_needs_force(world, client, versions):
    _v1, v2 = versions
    client.force_login(world.alice)
    url = reverse("datasets:version-delete", kwargs={"project": "project-a", "pk": v2.pk})
    client.post(url)
    assert type(v2).objects.filter(pk=v2.pk).exists()
    client.post(url, {"force": "1"})
    assert not type(v2).objects.filter(pk=v2.pk).exists()
