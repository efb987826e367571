"""Streamed responses under the real ASGI server: sent as they are produced, never read into memory first."""

from __future__ import annotations

import urllib.request
import warnings

import pytest

from apps.models.models import Run
from tests.factories import make_token

pytestmark = pytest.mark.live


def test_an_artifact_download_streams_without_django_buffering_it(world, live_asgi, tmp_path):
    from apps.models import artifacts
    from tests.factories import tracking_run

    run: Run = tracking_run(world.project_a, world.alice)
    payload = b"0123456789abcdef" * (3 * 2**20 // 16)  # 3 MiB: several chunks
    source = tmp_path / "big.bin"
    source.write_bytes(payload)
    path = f"{run.artifact_uri.split(':', 1)[1].lstrip('/')}/big.bin"
    with source.open("rb") as fh:
        artifacts.save(path, fh)
    token = make_token(world.alice, project=world.project_a)
    request = urllib.request.Request(
        f"{live_asgi.url}/api/2.0/mlflow-artifacts/artifacts/{path}", headers={"Authorization": f"Bearer {token}"}
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
    assert body == payload
    assert not [w for w in caught if "consume synchronous iterators" in str(w.message)]
