"""Tracking artifacts count against the project's storage quota, as dataset files do (issue 27: a 60 MB artifact was
accepted in a project whose quota is 10 MB). Over the quota an upload is refused with a clear error and leaves no
file behind; datasets and artifacts share one quota."""

from __future__ import annotations

import httpx
import pytest

from apps.models.models import ArtifactFile
from tests.conftest import user_client
from tests.datasets.helpers import announce, start
from tests.factories import dataset, dataset_version, make_token
from tests.models.conftest import MlflowApi, assert_error


@pytest.fixture
def root(api_a) -> str:
    run = api_a.run(api_a.experiment("art"))
    return run["info"]["artifact_uri"].removeprefix("mlflow-artifacts:/")


@pytest.fixture
def quota_of_1000(world):
    quota = world.project_a.quota
    quota.storage_bytes = 1000
    quota.save()
    return quota


def test_an_artifact_over_the_quota_is_refused_and_nothing_is_left(api_a, root, artifact_store, quota_of_1000):
    response = api_a.put_artifact(f"{root}/model.bin", b"x" * 6000)

    body = assert_error(response, 413, "RESOURCE_EXHAUSTED")
    assert "Storage quota exceeded" in body["message"]
    assert "1000\xa0bytes" in body["message"]
    assert not (artifact_store / root / "model.bin").exists()
    assert not ArtifactFile.objects.exists()


def test_artifacts_add_up_and_a_replaced_file_counts_once(api_a, root, artifact_store, quota_of_1000):
    assert api_a.put_artifact(f"{root}/a.bin", b"a" * 600).status_code == 200
    assert_error(api_a.put_artifact(f"{root}/b.bin", b"b" * 500), 413, "RESOURCE_EXHAUSTED")
    assert api_a.put_artifact(f"{root}/a.bin", b"A" * 900).status_code == 200  # replaces the 600 bytes
    assert api_a.put_artifact(f"{root}/c.bin", b"c" * 100).status_code == 200

    assert sorted(ArtifactFile.objects.values_list("path", "size")) == [(f"{root}/a.bin", 900), (f"{root}/c.bin", 100)]
    assert not (artifact_store / root / "b.bin").exists()

    assert api_a.delete_artifact(f"{root}/a.bin").status_code == 200  # deleting frees its share
    assert api_a.put_artifact(f"{root}/d.bin", b"d" * 800).status_code == 200
    assert api_a.delete_artifact(root).status_code == 200  # a whole folder too
    assert not ArtifactFile.objects.exists()


@pytest.mark.live
def test_a_chunked_upload_is_stopped_at_the_quota(world, live_asgi, artifact_store, quota_of_1000):
    """No Content-Length to check first: counted while it streams, and the partial file removed."""
    api = MlflowApi(make_token(world.alice, project=world.project_a))
    root = api.run(api.experiment("art"))["info"]["artifact_uri"].removeprefix("mlflow-artifacts:/")

    response = httpx.put(
        f"{live_asgi.url}/api/2.0/mlflow-artifacts/artifacts/{root}/stream.bin",
        content=(b"s" * 1000 for _ in range(5)),
        headers={"Authorization": api.headers["HTTP_AUTHORIZATION"], "Content-Type": "application/octet-stream"},
        timeout=30,
    )

    assert "content-length" not in response.request.headers
    assert response.status_code == 413, response.text
    assert response.json()["error_code"] == "RESOURCE_EXHAUSTED"
    assert not (artifact_store / root / "stream.bin").exists()
    assert not ArtifactFile.objects.exists()


def test_datasets_and_artifacts_share_one_quota(world, api_a, root, quota_of_1000):
    dataset_version(dataset(world.project_a, world.alice), {"a.bin": b"x" * 700})

    assert_error(api_a.put_artifact(f"{root}/big.bin", b"y" * 400), 413, "RESOURCE_EXHAUSTED")
    assert api_a.put_artifact(f"{root}/small.bin", b"y" * 200).status_code == 200

    client = user_client(world.alice)
    sid = start(client, world.project_a, dataset(world.project_a, world.alice, name="more")).json()["id"]
    response = announce(client, sid, "b.bin", b"z" * 150)  # 700 + 200 + 150 > 1000
    assert response.status_code == 400
    assert "Storage quota exceeded" in response.json()["size"][0]


def test_without_a_quota_artifacts_are_counted_and_accepted(world, api_a, root):
    world.project_a.quota.storage_bytes = None
    world.project_a.quota.save()

    assert api_a.put_artifact(f"{root}/free.bin", b"f" * 5000).status_code == 200
    assert ArtifactFile.objects.get().size == 5000


def test_a_path_too_long_to_be_counted_is_refused_and_nothing_is_written(api_a, root, artifact_store):
    path = f"{root}/" + "d/" * 520 + "x.bin"

    assert_error(api_a.put_artifact(path, b"x"), 400, "INVALID_PARAMETER_VALUE")
    assert not ArtifactFile.objects.exists()
    assert not (artifact_store / root / "d").exists()
