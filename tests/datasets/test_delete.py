from __future__ import annotations

import pytest

from apps.datasets import blobs
from apps.datasets.models import Blob, Dataset, DatasetVersion
from apps.datasets.services import record_usage
from tests.access import make_run
from tests.conftest import user_client
from tests.datasets.conftest import sha256
from tests.factories import dataset, dataset_version


@pytest.mark.smoke
def test_deleting_a_version_purges_only_the_blobs_no_other_version_uses(world):
    ds = dataset(world.project_a, world.alice)
    v1 = dataset_version(ds, {"shared.csv": b"shared", "only1.txt": b"only in v1"})
    dataset_version(ds, {"shared.csv": b"shared", "only2.txt": b"only in v2"})
    response = user_client(world.alice).delete(f"/api/v1/dataset-versions/{v1.pk}/")
    assert response.status_code == 200
    assert response.json() == {"purged_blobs": [sha256(b"only in v1")]}
    assert not DatasetVersion.objects.filter(pk=v1.pk).exists()
    assert not blobs.exists(sha256(b"only in v1"))
    assert blobs.exists(sha256(b"shared"))
    assert blobs.exists(sha256(b"only in v2"))
    assert set(Blob.objects.values_list("pk", flat=True)) == {sha256(b"shared"), sha256(b"only in v2")}


def test_blobs_shared_with_another_project_survive(world):
    mine = dataset_version(dataset(world.project_a, world.alice), {"a.csv": b"same bytes"})
    dataset_version(dataset(world.project_b, world.charlie), {"b.csv": b"same bytes"})
    assert user_client(world.alice).delete(f"/api/v1/datasets/{mine.dataset_id}/").json() == {"purged_blobs": []}
    assert blobs.exists(sha256(b"same bytes"))


@pytest.mark.smoke
def test_a_version_used_by_a_run_needs_force(world):
    version = dataset_version(dataset(world.project_a, world.alice), {"a.csv": b"used"})
    record_usage(version, pipeline_run=make_run(world.project_a, world.alice))
    client = user_client(world.alice)
    refused = client.delete(f"/api/v1/dataset-versions/{version.pk}/")
    assert refused.status_code == 400
    assert "was used by a pipeline run" in refused.json()["force"][0]
    assert blobs.exists(sha256(b"used"))
    forced = client.delete(f"/api/v1/dataset-versions/{version.pk}/?force=true")
    assert forced.status_code == 200
    assert not blobs.exists(sha256(b"used"))


def test_deleting_a_dataset_used_by_a_run_needs_force(world):
    version = dataset_version(dataset(world.project_a, world.alice), {"a.csv": b"used"})
    record_usage(version, pipeline_run=make_run(world.project_a, world.alice))
    client = user_client(world.alice)
    assert client.delete(f"/api/v1/datasets/{version.dataset_id}/").status_code == 400
    assert client.delete(f"/api/v1/datasets/{version.dataset_id}/?force=1").status_code == 200
    assert not Dataset.objects.exists()
    assert not Blob.objects.exists()
