from __future__ import annotations

import hashlib
import io
import zipfile

import pytest

from tests.conftest import user_client
from tests.factories import dataset, dataset_version

FILES = {"iris.csv": b"a,b\n1,2\n", "img/x.bin": bytes(range(256)) * 1000, "empty.txt": b""}


@pytest.mark.smoke
def test_a_file_downloads_byte_identical(world):
    version = dataset_version(dataset(world.project_a, world.alice), FILES)
    response = user_client(world.bob).get(f"/api/v1/dataset-versions/{version.pk}/download/?path=img/x.bin")
    assert response.status_code == 200
    body = b"".join(response.streaming_content)
    assert hashlib.sha256(body).hexdigest() == hashlib.sha256(FILES["img/x.bin"]).hexdigest()
    assert response["X-Content-SHA256"] == hashlib.sha256(FILES["img/x.bin"]).hexdigest()
    assert response["Content-Length"] == str(len(FILES["img/x.bin"]))
    assert 'filename="x.bin"' in response["Content-Disposition"]


def test_a_whole_version_downloads_as_a_streamed_zip(world):
    version = dataset_version(dataset(world.project_a, world.alice), FILES)
    response = user_client(world.alice).get(f"/api/v1/dataset-versions/{version.pk}/download/")
    assert response.status_code == 200
    assert response.streaming
    archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    assert archive.testzip() is None
    assert {name: archive.read(name) for name in archive.namelist()} == FILES
    assert "iris-v1.zip" in response["Content-Disposition"]


def test_a_missing_file_is_404(world):
    version = dataset_version(dataset(world.project_a, world.alice), FILES)
    response = user_client(world.alice).get(f"/api/v1/dataset-versions/{version.pk}/download/?path=../etc/passwd")
    assert response.status_code == 404
