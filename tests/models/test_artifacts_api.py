"""The proxied artifact service: streamed upload and download, listing, deletion, path safety."""

from __future__ import annotations

import pytest

from tests.models.conftest import assert_error


@pytest.fixture
def root(api_a) -> str:
    run = api_a.run(api_a.experiment("art"))
    return run["info"]["artifact_uri"].removeprefix("mlflow-artifacts:/")


@pytest.mark.smoke
def test_upload_download_list_delete(api_a, root, artifact_store):
    payload = bytes(range(256)) * 20_000  # 5 MB: bigger than the in-memory upload limit
    assert api_a.put_artifact(f"{root}/dir/blob.bin", payload).status_code == 200
    assert api_a.put_artifact(f"{root}/dir/sub/note.txt", b"hi").status_code == 200
    assert api_a.put_artifact(f"{root}/top.txt", b"top").status_code == 200
    assert (artifact_store / root / "dir" / "blob.bin").stat().st_size == len(payload)

    response = api_a.get_artifact(f"{root}/dir/blob.bin")
    assert response.status_code == 200
    assert response.streaming
    assert b"".join(response.streaming_content) == payload

    listing = api_a.get_artifact("", path=f"{root}/dir").json()
    assert listing == {"files": [{"path": "blob.bin", "is_dir": False, "file_size": len(payload)},
                                 {"path": "sub", "is_dir": True}]}  # fmt: skip

    # overwrite keeps the name
    assert api_a.put_artifact(f"{root}/top.txt", b"new").status_code == 200
    assert b"".join(api_a.get_artifact(f"{root}/top.txt").streaming_content) == b"new"

    assert api_a.delete_artifact(f"{root}/dir").status_code == 200
    assert api_a.get_artifact("", path=root).json() == {"files": [{"path": "top.txt", "is_dir": False, "file_size": 3}]}
    assert_error(api_a.get_artifact(f"{root}/dir/blob.bin"), 404, "RESOURCE_DOES_NOT_EXIST")


@pytest.mark.smoke
@pytest.mark.parametrize("bad", ["../../etc/passwd", "{root}/../../../x", "{root}/a/../../b", "{root}\\..\\x"])
def test_paths_with_dot_dot_are_rejected(api_a, root, bad):
    path = bad.format(root=root)
    assert_error(api_a.put_artifact(path, b"x"), 400, "INVALID_PARAMETER_VALUE")
    assert_error(api_a.get_artifact("", path=path), 400, "INVALID_PARAMETER_VALUE")


def test_absolute_paths_are_rejected(api_a, root):
    response = api_a.client.put("/api/2.0/mlflow-artifacts/artifacts//etc/passwd", data=b"x",
                                content_type="application/octet-stream", **api_a.headers)  # fmt: skip
    assert_error(response, 400, "INVALID_PARAMETER_VALUE")
    assert_error(api_a.get_artifact("", path="/etc"), 400, "INVALID_PARAMETER_VALUE")
    assert_error(api_a.get("artifacts/list", run_id=root.split("/")[1], path="/etc"), 400, "INVALID_PARAMETER_VALUE")
    assert_error(api_a.get("artifacts/list", run_id=root.split("/")[1], path="a/../.."), 400, "INVALID_PARAMETER_VALUE")


def test_run_artifact_listing_through_the_tracking_api(api_a, root):
    api_a.put_artifact(f"{root}/model/MLmodel", b"flavors: {}")
    run_id = root.split("/")[1]
    data = api_a.get("artifacts/list", run_id=run_id).json()
    assert data == {"root_uri": f"mlflow-artifacts:/{root}", "files": [{"path": "model", "is_dir": True}]}
    data = api_a.get("artifacts/list", run_id=run_id, path="model").json()
    assert data["files"] == [{"path": "model/MLmodel", "is_dir": False, "file_size": 11}]
