"""The same round trip on the S3 backend (django-storages against moto's S3 server on loopback)."""

from __future__ import annotations

import hashlib
import io
import zipfile

import boto3
import pytest

from apps.datasets import blobs
from apps.datasets.models import DatasetVersion
from apps.datasets.services import materialize
from apps.datasets.tasks import analyze_version
from tests.conftest import user_client
from tests.datasets.conftest import sha256
from tests.datasets.helpers import announce, patch, start, upload_version
from tests.factories import dataset

CSV = b"a,b\n1,x\n2,y\n3,z\n"
BIG = bytes(range(256)) * 8192  # 2 MiB


def _keys(moto_server, bucket) -> set[str]:
    s3 = boto3.client(
        "s3", endpoint_url=moto_server, aws_access_key_id="testing", aws_secret_access_key="testing",
        region_name="us-east-1",
    )  # fmt: skip
    return {o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])}


def test_upload_resume_commit_preview_diff_download_on_s3(world, s3, moto_server):
    ds = dataset(world.project_a, world.alice)
    client = user_client(world.alice)
    # v1, with an interrupted chunk that is resumed from the server's offset
    sid = start(client, world.project_a, ds).json()["id"]
    fid = announce(client, sid, "big.bin", BIG).json()["id"]
    assert patch(client, fid, 0, BIG[:700_000]).json()["offset"] == 700_000
    assert patch(client, fid, 0, BIG[:700_000]).status_code == 409  # a retry after a lost answer
    offset = int(client.head(f"/api/v1/dataset-upload-files/{fid}/")["Upload-Offset"])
    assert patch(client, fid, offset, BIG[offset:]).json()["complete"] is True
    csv_id = announce(client, sid, "t.csv", CSV).json()["id"]
    patch(client, csv_id, 0, CSV)
    v1 = client.post(f"/api/v1/dataset-uploads/{sid}/commit/", {}, format="json").json()
    assert f"datasets/{blobs.blob_storage_name(sha256(BIG))}" in _keys(moto_server, s3)
    v2 = upload_version(client, world.project_a, ds, {"t.csv": CSV + b"4,w\n"}, base="latest")

    for v in (v1, v2):
        analyze_version(v["id"])
    preview = client.get(f"/api/v1/dataset-versions/{v2['id']}/preview/?path=t.csv").json()
    assert preview["preview"]["row_count"] == 4
    diff = client.get(f"/api/v1/dataset-versions/{v2['id']}/diff/").json()
    assert diff["changed"][0]["path"] == "t.csv"
    assert diff["rows"]["delta"] == 1

    got = client.get(f"/api/v1/dataset-versions/{v1['id']}/download/?path=big.bin")
    assert hashlib.sha256(b"".join(got.streaming_content)).hexdigest() == sha256(BIG)
    whole = client.get(f"/api/v1/dataset-versions/{v2['id']}/download/")
    archive = zipfile.ZipFile(io.BytesIO(b"".join(whole.streaming_content)))
    assert hashlib.sha256(archive.read("big.bin")).hexdigest() == sha256(BIG)

    local = materialize(DatasetVersion.objects.get(pk=v2["id"]))
    assert hashlib.sha256((local / "big.bin").read_bytes()).hexdigest() == sha256(BIG)

    # deleting v1 keeps big.bin (v2 has it) but purges the old t.csv
    deleted = client.delete(f"/api/v1/dataset-versions/{v1['id']}/").json()
    assert deleted == {"purged_blobs": [sha256(CSV)]}
    keys = _keys(moto_server, s3)
    assert f"datasets/{blobs.blob_storage_name(sha256(BIG))}" in keys
    assert f"datasets/{blobs.blob_storage_name(sha256(CSV))}" not in keys


@pytest.mark.smoke
def test_a_wrong_checksum_stores_nothing_on_s3(world, s3, moto_server):
    ds = dataset(world.project_a, world.alice)
    client = user_client(world.alice)
    sid = start(client, world.project_a, ds).json()["id"]
    fid = client.post(
        f"/api/v1/dataset-uploads/{sid}/files/", {"path": "x", "size": 3, "sha256": "1" * 64}, format="json"
    ).json()["id"]
    assert patch(client, fid, 0, b"abc").status_code == 400
    assert _keys(moto_server, s3) == set()
