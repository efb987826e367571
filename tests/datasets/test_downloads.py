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


def test_a_range_from_byte_n_answers_the_rest_so_a_stopped_download_continues(world):
    version = dataset_version(dataset(world.project_a, world.alice), FILES)
    url = f"/api/v1/dataset-versions/{version.pk}/download/?path=img/x.bin"
    whole = FILES["img/x.bin"]

    rest = user_client(world.bob).get(url, HTTP_RANGE="bytes=1000-")
    assert rest.status_code == 206
    assert b"".join(rest.streaming_content) == whole[1000:]
    assert (rest["Content-Range"], rest["Content-Length"]) == (
        f"bytes 1000-{len(whole) - 1}/{len(whole)}",
        str(len(whole) - 1000),
    )
    assert rest["X-Content-SHA256"] == hashlib.sha256(whole).hexdigest()  # of the whole file, to check the result

    past = user_client(world.bob).get(url, HTTP_RANGE=f"bytes={len(whole)}-")
    assert (past.status_code, past["Content-Range"]) == (416, f"bytes */{len(whole)}")
    other = user_client(world.bob).get(url, HTTP_RANGE="bytes=0-9,20-29")  # a form it does not serve: all of it
    assert (other.status_code, b"".join(other.streaming_content)) == (200, whole)
    assert other["Accept-Ranges"] == "bytes"


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
