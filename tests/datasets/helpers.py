"""The upload protocol as a test client speaks it: session → files → PATCH chunks → commit."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from rest_framework.test import APIClient


def start(client: APIClient, project, ds, **extra: Any):
    return client.post("/api/v1/dataset-uploads/", {"project": project.slug, "dataset": ds.pk, **extra}, format="json")


def announce(client: APIClient, session_id: str, path: str, content: bytes, *, with_sha: bool = True, **extra: Any):
    body = {"path": path, "size": len(content), **extra}
    if with_sha:
        body["sha256"] = hashlib.sha256(content).hexdigest()
    return client.post(f"/api/v1/dataset-uploads/{session_id}/files/", body, format="json")


def patch(client: APIClient, file_id: str, offset: int, data: bytes, checksum: bool = False, **headers: str):
    if checksum:
        headers["HTTP_UPLOAD_CHECKSUM"] = "sha256 " + base64.b64encode(hashlib.sha256(data).digest()).decode()
    return client.generic(
        "PATCH",
        f"/api/v1/dataset-upload-files/{file_id}/",
        data,
        content_type="application/offset+octet-stream",
        HTTP_UPLOAD_OFFSET=str(offset),
        **headers,
    )


def send(client: APIClient, file_id: str, content: bytes, chunk: int = 7) -> Any:
    offset = 0
    response = None
    while offset < len(content) or not content:
        response = patch(client, file_id, offset, content[offset : offset + chunk])
        assert response.status_code == 200, response.content
        offset = response.json()["offset"]
        if not content:
            break
    return response


def upload_version(client: APIClient, project, ds, files: dict[str, bytes], chunk: int = 7, **extra: Any) -> dict:
    """The whole protocol; returns the committed version's JSON."""
    session = start(client, project, ds, **extra)
    assert session.status_code == 201, session.content
    sid = session.json()["id"]
    for path, content in files.items():
        announced = announce(client, sid, path, content)
        assert announced.status_code == 201, announced.content
        send(client, announced.json()["id"], content, chunk)
    committed = client.post(f"/api/v1/dataset-uploads/{sid}/commit/", {}, format="json")
    assert committed.status_code == 201, committed.content
    return committed.json()
