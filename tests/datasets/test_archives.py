"""Archive uploads expand into files; traversal, links and bombs are refused with nothing stored."""

from __future__ import annotations

import io
import tarfile
import zipfile

import pytest

from apps.datasets.models import Blob, DatasetVersion
from tests.conftest import user_client
from tests.datasets.conftest import sha256
from tests.datasets.helpers import announce, send, start
from tests.factories import dataset


def _zip(members: dict[str, bytes], compression=zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=compression) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def _tar(members: list[tarfile.TarInfo | tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                tf.addfile(member)
            else:
                info = tarfile.TarInfo(member[0])
                info.size = len(member[1])
                tf.addfile(info, io.BytesIO(member[1]))
    return buf.getvalue()


def _upload_archive(client, project, ds, archive: bytes, prefix: str = ""):
    sid = start(client, project, ds).json()["id"]
    announced = announce(client, sid, prefix, archive, archive=True)
    assert announced.status_code == 201, announced.content
    send(client, announced.json()["id"], archive, chunk=4096)
    return client.post(f"/api/v1/dataset-uploads/{sid}/commit/", {}, format="json")


@pytest.mark.smoke
def test_a_zip_expands_into_the_versions_files(world):
    ds = dataset(world.project_a, world.alice)
    archive = _zip({"train/a.csv": b"x\n1\n", "train/b.csv": b"x\n2\n", "README.md": b"hi"})
    response = _upload_archive(user_client(world.alice), world.project_a, ds, archive, prefix="data")
    assert response.status_code == 201, response.content
    version = DatasetVersion.objects.get(pk=response.json()["id"])
    assert {f.path: f.blob_id for f in version.files.all()} == {
        "data/README.md": sha256(b"hi"),
        "data/train/a.csv": sha256(b"x\n1\n"),
        "data/train/b.csv": sha256(b"x\n2\n"),
    }


def test_a_tar_gz_expands_too(world):
    ds = dataset(world.project_a, world.alice)
    response = _upload_archive(user_client(world.alice), world.project_a, ds, _tar([("a/b.txt", b"bee")]))
    assert response.status_code == 201, response.content
    assert list(DatasetVersion.objects.get().files.values_list("path", flat=True)) == ["a/b.txt"]


@pytest.mark.smoke
@pytest.mark.parametrize("name", ["../evil.txt", "/abs/evil.txt", "ok/../../evil.txt"])
def test_archive_members_with_traversal_names_are_refused(world, name):
    ds = dataset(world.project_a, world.alice)
    archive = _zip({"fine.txt": b"fine", name: b"evil"})
    response = _upload_archive(user_client(world.alice), world.project_a, ds, archive)
    assert response.status_code == 400
    assert "archive" in response.json()
    assert not DatasetVersion.objects.exists()
    assert not Blob.objects.exists()


def test_symlinks_in_a_tar_are_refused(world):
    ds = dataset(world.project_a, world.alice)
    link = tarfile.TarInfo("passwd")
    link.type = tarfile.SYMTYPE
    link.linkname = "/etc/passwd"
    response = _upload_archive(user_client(world.alice), world.project_a, ds, _tar([("a.txt", b"a"), link]))
    assert response.status_code == 400
    assert "“passwd” is a link" in response.json()["archive"][0]
    assert not DatasetVersion.objects.exists()
    assert not Blob.objects.exists()


def test_symlinks_in_a_zip_are_refused(world):
    ds = dataset(world.project_a, world.alice)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        info = zipfile.ZipInfo("link")
        info.external_attr = 0o120777 << 16
        zf.writestr(info, "/etc/passwd")
    response = _upload_archive(user_client(world.alice), world.project_a, ds, buf.getvalue())
    assert response.status_code == 400
    assert "symbolic link" in response.json()["archive"][0]


@pytest.mark.smoke
def test_an_archive_bomb_is_refused_and_nothing_is_stored(world, settings):
    settings.DATASETS_ARCHIVE_MAX_BYTES = 1_000_000  # the cap a 5 MB bomb runs into (default: 100 GiB)
    ds = dataset(world.project_a, world.alice)
    bomb = _zip({"small.txt": b"ok", "zeros.bin": b"\0" * 5_000_000})
    assert len(bomb) < 10_000
    response = _upload_archive(user_client(world.alice), world.project_a, ds, bomb)
    assert response.status_code == 400
    assert "expands past 1000000 bytes" in response.json()["archive"][0]
    assert "Nothing was stored" in response.json()["archive"][0]
    assert not DatasetVersion.objects.exists()
    assert not Blob.objects.exists()


def test_the_compression_ratio_cap_applies_to_big_archives(world, settings):
    settings.DATASETS_ARCHIVE_MAX_RATIO = 10
    ds = dataset(world.project_a, world.alice)
    bomb = _zip({"zeros.bin": b"\0" * (70 * 2**20)})
    response = _upload_archive(user_client(world.alice), world.project_a, ds, bomb)
    assert response.status_code == 400
    assert "10× its size" in response.json()["archive"][0]


def test_a_file_that_is_not_an_archive_is_a_clear_error(world):
    ds = dataset(world.project_a, world.alice)
    response = _upload_archive(user_client(world.alice), world.project_a, ds, b"just text, no archive")
    assert response.status_code == 400
    assert response.json()["archive"] == ["This is neither a zip nor a tar archive."]
