"""Datasets tests: a private blob store, staging and work folder per test; an S3 server (moto) on loopback."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from portal.lib.serve import free_port


@pytest.fixture(autouse=True)
def dataset_dirs(settings, tmp_path) -> Path:
    """Blobs, upload staging and materialised copies under this test's tmp_path (xdist workers never share)."""
    settings.STORAGES = {
        **django_settings.STORAGES,
        "datasets": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": tmp_path / "store"},
        },
    }
    settings.DATASETS_UPLOAD_DIR = tmp_path / "uploads"
    settings.PORTAL_WORK_DIR = tmp_path / "work"
    yield tmp_path
    # materialised trees are read-only: make them removable for pytest's tmp_path cleanup
    for dirpath, _dirs, _files in os.walk(tmp_path):
        os.chmod(dirpath, 0o755)


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    """moto's S3 server as a subprocess on a free loopback port."""
    port = free_port()
    exe = shutil.which("moto_server", path=str(Path(sys.executable).parent)) or "moto_server"
    proc = subprocess.Popen(
        [exe, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    import urllib.request

    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url, timeout=1).read()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail("moto_server did not start")
            time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def s3(settings, moto_server, dataset_dirs) -> str:
    """Point the datasets storage at a fresh bucket of the moto server; returns the bucket name."""
    import boto3

    bucket = f"portal-{uuid.uuid4().hex[:12]}"
    credentials = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region_name": "us-east-1"}
    boto3.client("s3", endpoint_url=moto_server, **credentials).create_bucket(Bucket=bucket)
    settings.STORAGES = {
        **settings.STORAGES,
        "datasets": {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {
                "bucket_name": bucket,
                "endpoint_url": moto_server,
                "access_key": "testing",
                "secret_key": "testing",
                "region_name": "us-east-1",
                "location": "datasets",
                "max_memory_size": 8 * 2**20,
            },
        },
    }
    return bucket


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
