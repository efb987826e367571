"""The resumable upload protocol through the API: sessions, files, chunks, checksums, quota and commit."""

from __future__ import annotations

import pytest

from apps.datasets.models import Blob, DatasetVersion, UploadFile, UploadSession, UploadStatus
from apps.datasets.uploads import partial_path
from tests.conftest import token_client, user_client
from tests.datasets.conftest import sha256
from tests.datasets.helpers import announce, patch, send, start, upload_version
from tests.factories import dataset, dataset_version

CSV = b"sepal,petal,species\n5.1,1.4,setosa\n7.0,4.7,versicolor\n6.3,6.0,virginica\n"


@pytest.mark.smoke
def test_upload_in_chunks_and_commit_makes_a_version_with_the_right_manifest(world):
    ds = dataset(world.project_a, world.alice)
    client = user_client(world.bob)
    version = upload_version(
        client, world.project_a, ds, {"iris.csv": CSV, "docs/README.md": b"# iris\n"}, message="v1"
    )
    assert version["number"] == 1
    assert version["file_count"] == 2
    assert version["total_size"] == len(CSV) + 7
    v = DatasetVersion.objects.get(pk=version["id"])
    assert {f.path: f.blob_id for f in v.files.all()} == {
        "iris.csv": sha256(CSV),
        "docs/README.md": sha256(b"# iris\n"),
    }
    assert v.message == "v1"
    files = client.get(f"/api/v1/dataset-versions/{v.pk}/files/").json()["results"]
    assert files == [
        {"path": "docs/README.md", "size": 7, "sha256": sha256(b"# iris\n")},
        {"path": "iris.csv", "size": len(CSV), "sha256": sha256(CSV)},
    ]


def test_nothing_is_visible_before_commit_and_the_offset_says_where_to_resume(world):
    ds = dataset(world.project_a, world.alice)
    client = user_client(world.alice)
    sid = start(client, world.project_a, ds).json()["id"]
    fid = announce(client, sid, "iris.csv", CSV).json()["id"]
    assert patch(client, fid, 0, CSV[:10]).json()["offset"] == 10
    head = client.head(f"/api/v1/dataset-upload-files/{fid}/")
    assert head["Upload-Offset"] == "10"
    assert head["Upload-Length"] == str(len(CSV))
    assert not DatasetVersion.objects.exists()
    # a retry of an old chunk (the client missed our answer) is told the real offset
    stale = patch(client, fid, 0, CSV[:10])
    assert stale.status_code == 409
    assert stale["Upload-Offset"] == "10"
    send_rest = patch(client, fid, 10, CSV[10:])
    assert send_rest.json()["complete"] is True
    incomplete = client.post(f"/api/v1/dataset-uploads/{sid}/commit/", {}, format="json")
    assert incomplete.status_code == 201


def test_commit_refuses_incomplete_files(world):
    ds = dataset(world.project_a, world.alice)
    client = user_client(world.alice)
    sid = start(client, world.project_a, ds).json()["id"]
    fid = announce(client, sid, "iris.csv", CSV).json()["id"]
    patch(client, fid, 0, CSV[:5])
    response = client.post(f"/api/v1/dataset-uploads/{sid}/commit/", {}, format="json")
    assert response.status_code == 400
    assert f"iris.csv (5/{len(CSV)} bytes)" in response.json()["files"][0]
    assert not DatasetVersion.objects.exists()


@pytest.mark.smoke
def test_a_wrong_checksum_is_a_clear_400_and_nothing_is_stored(world):
    ds = dataset(world.project_a, world.alice)
    client = user_client(world.alice)
    sid = start(client, world.project_a, ds).json()["id"]
    fid = client.post(
        f"/api/v1/dataset-uploads/{sid}/files/", {"path": "x.csv", "size": len(CSV), "sha256": "0" * 64}, format="json"
    ).json()["id"]
    response = patch(client, fid, 0, CSV)
    assert response.status_code == 400
    assert "Checksum mismatch for “x.csv”" in response.json()["sha256"][0]
    assert UploadFile.objects.get(pk=fid).offset == 0
    assert not Blob.objects.exists()
    assert partial_path(UploadFile.objects.get(pk=fid)).stat().st_size == 0


def test_a_chunk_whose_upload_checksum_does_not_match_is_dropped(world):
    ds = dataset(world.project_a, world.alice)
    client = user_client(world.alice)
    sid = start(client, world.project_a, ds).json()["id"]
    fid = announce(client, sid, "x.csv", CSV).json()["id"]
    good = patch(client, fid, 0, CSV[:10], checksum=True)
    assert good.json()["offset"] == 10
    bad = patch(client, fid, 10, CSV[10:20], HTTP_UPLOAD_CHECKSUM="sha256 " + "A" * 43 + "=")
    assert bad.status_code == 400
    assert "does not match its Upload-Checksum" in bad.json()["checksum"][0]
    assert client.head(f"/api/v1/dataset-upload-files/{fid}/")["Upload-Offset"] == "10"


def test_a_chunk_past_the_declared_size_is_refused(world):
    ds = dataset(world.project_a, world.alice)
    client = user_client(world.alice)
    sid = start(client, world.project_a, ds).json()["id"]
    fid = announce(client, sid, "x.csv", b"abc").json()["id"]
    response = patch(client, fid, 0, b"abcdef")
    assert response.status_code == 400
    assert "past the declared file size" in response.json()["chunk"][0]
    assert UploadFile.objects.get(pk=fid).offset == 0


def test_a_chunk_must_be_sent_as_octet_stream_with_an_offset(world):
    ds = dataset(world.project_a, world.alice)
    client = user_client(world.alice)
    sid = start(client, world.project_a, ds).json()["id"]
    fid = announce(client, sid, "x.csv", b"abc").json()["id"]
    assert client.patch(f"/api/v1/dataset-upload-files/{fid}/", {"a": 1}, format="json").status_code == 415
    no_offset = client.generic(
        "PATCH", f"/api/v1/dataset-upload-files/{fid}/", b"abc", content_type="application/offset+octet-stream"
    )
    assert no_offset.status_code == 400
    assert "Upload-Offset" in no_offset.json()["offset"][0]


@pytest.mark.smoke
@pytest.mark.parametrize("path", ["../x.csv", "/etc/passwd", "a/../../x", "C:/x.csv", "a\\b.csv"])
def test_traversal_and_absolute_names_are_refused(world, path):
    ds = dataset(world.project_a, world.alice)
    client = user_client(world.alice)
    sid = start(client, world.project_a, ds).json()["id"]
    response = announce(client, sid, path, b"abc")
    assert response.status_code == 400
    assert "path" in response.json()
    assert not UploadFile.objects.exists()


@pytest.mark.smoke
def test_the_storage_quota_is_enforced_with_a_clear_message(world):
    quota = world.project_a.quota
    quota.storage_bytes = 100
    quota.save()
    ds = dataset(world.project_a, world.alice)
    dataset_version(ds, {"a.bin": b"x" * 60})
    client = user_client(world.alice)
    sid = start(client, world.project_a, ds).json()["id"]
    response = announce(client, sid, "b.bin", b"y" * 50)
    assert response.status_code == 400
    message = response.json()["size"][0]
    assert "Storage quota exceeded" in message
    assert "40\xa0bytes left" in message
    assert "100\xa0bytes" in message
    assert not UploadFile.objects.exists()
    # up to the limit is fine
    assert announce(client, sid, "ok.bin", b"y" * 40).status_code == 201


def test_base_latest_starts_from_the_previous_files_and_stores_unchanged_files_once(world):
    ds = dataset(world.project_a, world.alice)
    client = user_client(world.alice)
    upload_version(client, world.project_a, ds, {"a.csv": CSV, "b.txt": b"keep"})
    v2 = upload_version(client, world.project_a, ds, {"a.csv": CSV + b"5.0,1.0,setosa\n"}, base="latest")
    version = DatasetVersion.objects.get(pk=v2["id"])
    assert sorted(version.files.values_list("path", flat=True)) == ["a.csv", "b.txt"]
    assert version.parent.number == 1
    assert Blob.objects.count() == 3


def test_commit_can_leave_out_files_of_the_base(world):
    ds = dataset(world.project_a, world.alice)
    dataset_version(ds, {"a.csv": CSV, "b.txt": b"gone"})
    client = user_client(world.alice)
    sid = start(client, world.project_a, ds, base="latest").json()["id"]
    response = client.post(f"/api/v1/dataset-uploads/{sid}/commit/", {"remove": ["b.txt"]}, format="json")
    assert response.status_code == 201, response.content
    assert list(DatasetVersion.objects.get(pk=response.json()["id"]).files.values_list("path", flat=True)) == ["a.csv"]


def test_an_unknown_base_version_is_a_clear_error(world):
    ds = dataset(world.project_a, world.alice)
    response = start(user_client(world.alice), world.project_a, ds, base="7")
    assert response.status_code == 400
    assert response.json()["base"] == ["Dataset “iris” has no version 7 (newest: none)."]


def test_aborting_an_upload_leaves_no_version_and_no_chunks(world):
    ds = dataset(world.project_a, world.alice)
    client = user_client(world.alice)
    sid = start(client, world.project_a, ds).json()["id"]
    fid = announce(client, sid, "a.csv", CSV).json()["id"]
    patch(client, fid, 0, CSV[:10])
    part = partial_path(UploadFile.objects.get(pk=fid))
    assert part.exists()
    assert client.delete(f"/api/v1/dataset-uploads/{sid}/").status_code == 204
    assert not part.exists()
    assert not UploadSession.objects.exists()
    assert not DatasetVersion.objects.exists()


def test_a_committed_session_takes_no_more_files(world):
    ds = dataset(world.project_a, world.alice)
    client = user_client(world.alice)
    sid = start(client, world.project_a, ds).json()["id"]
    send(client, announce(client, sid, "a.csv", CSV).json()["id"], CSV, chunk=1000)
    client.post(f"/api/v1/dataset-uploads/{sid}/commit/", {}, format="json")
    assert UploadSession.objects.get(pk=sid).status == UploadStatus.COMMITTED
    again = announce(client, sid, "b.csv", CSV)
    assert again.status_code == 400
    assert "committed" in again.json()["status"][0]


def test_a_read_only_token_cannot_upload(world):
    ds = dataset(world.project_a, world.alice)
    response = start(token_client(world.alice, scope="read"), world.project_a, ds)
    assert response.status_code == 403


def test_a_viewer_cannot_upload(world):
    from apps.projects.models import Role
    from tests.factories import UserFactory, add_member

    viewer = UserFactory(username="vera")
    add_member(world.project_a, viewer, Role.VIEWER)
    ds = dataset(world.project_a, world.alice)
    assert start(user_client(viewer), world.project_a, ds).status_code == 403


def test_empty_files_are_allowed(world):
    ds = dataset(world.project_a, world.alice)
    version = upload_version(user_client(world.alice), world.project_a, ds, {"empty.txt": b"", "a.txt": b"a"})
    assert version["file_count"] == 2
