"""PATCH chunks through the real ASGI server: the body streams into the partial file (apps.datasets.asgi).

Authentication, tenant isolation and permissions are the DRF view's: these tests check that they still hold
on the streamed route, and that a chunk that does not arrive whole, or is refused, leaves nothing behind.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import secrets
import socket
import time

import pytest
from django.conf import settings
from django.test import Client as DjangoClient

from apps.datasets import uploads
from apps.datasets.asgi import ChunkUploadRoute
from apps.datasets.models import Blob, DatasetVersion, UploadFile
from apps.projects.models import Role
from tests.factories import add_member, dataset, make_token

pytestmark = pytest.mark.live

MIB = 2**20
CHUNK_HEADERS = {"Content-Type": "application/offset+octet-stream"}


def call(server, method: str, path: str, body: bytes = b"", headers: dict | None = None, token: str | None = None):
    conn = http.client.HTTPConnection(server.host, server.port, timeout=30)
    all_headers = dict(headers or {})
    if token:
        all_headers["Authorization"] = f"Bearer {token}"
    conn.request(method, path, body=body, headers=all_headers)
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response, data


def call_json(server, token: str, method: str, path: str, payload: dict) -> dict:
    response, data = call(
        server, method, path, json.dumps(payload).encode(), {"Content-Type": "application/json"}, token
    )
    assert response.status in (200, 201), data
    return json.loads(data)


def new_upload(server, token: str, project, owner, content: bytes, sha256: str | None = None) -> tuple[dict, str]:
    ds = dataset(project, owner)
    session = call_json(server, token, "POST", "/api/v1/dataset-uploads/", {"project": project.slug, "dataset": ds.pk})
    upload = call_json(
        server, token, "POST", f"/api/v1/dataset-uploads/{session['id']}/files/",
        {"path": "data.bin", "size": len(content), "sha256": sha256 or hashlib.sha256(content).hexdigest()},
    )  # fmt: skip
    return session, f"/api/v1/dataset-upload-files/{upload['id']}/"


def patch(server, url: str, offset: int, data: bytes, token: str | None, **headers: str):
    return call(server, "PATCH", url, data, {**CHUNK_HEADERS, "Upload-Offset": str(offset), **headers}, token)


def staged_size(upload_url: str) -> int:
    upload = UploadFile.objects.get(pk=upload_url.rstrip("/").rsplit("/", 1)[1])
    return uploads.partial_path(upload).stat().st_size


def content_of(size: int) -> bytes:
    return (bytes(range(256)) * (size // 256 + 1))[:size]


def test_a_connection_killed_mid_chunk_drops_that_chunk_whole_and_the_upload_resumes(world, live_asgi):
    token = make_token(world.alice)
    content = content_of(20 * MIB)
    session, url = new_upload(live_asgi, token, world.project_a, world.alice, content)
    first = 6 * MIB
    response, data = patch(live_asgi, url, 0, content[:first], token)
    assert response.status == 200, data

    # An 8 MiB chunk (hashed in a second thread while it is written): 5 MiB arrive, then a reset.
    sock = socket.create_connection((live_asgi.host, live_asgi.port))
    head = (
        f"PATCH {url} HTTP/1.1\r\nHost: {live_asgi.host}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/offset+octet-stream\r\nUpload-Offset: {first}\r\nContent-Length: {8 * MIB}\r\n\r\n"
    ).encode()
    sock.sendall(head + content[first : first + 5 * MIB])
    deadline = time.monotonic() + 10
    while staged_size(url) <= first and time.monotonic() < deadline:  # the server is writing the chunk
        time.sleep(0.01)
    assert staged_size(url) > first
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST
    sock.close()

    deadline = time.monotonic() + 10
    while staged_size(url) != first and time.monotonic() < deadline:
        time.sleep(0.01)
    assert staged_size(url) == first  # the cut-off chunk left nothing
    response, _ = call(live_asgi, "HEAD", url, token=token)
    assert response.getheader("Upload-Offset") == str(first)
    assert not DatasetVersion.objects.exists()

    offset = first
    while offset < len(content):
        response, data = patch(live_asgi, url, offset, content[offset : offset + 5 * MIB], token)
        assert response.status == 200, data
        offset = json.loads(data)["offset"]
    version = call_json(live_asgi, token, "POST", f"/api/v1/dataset-uploads/{session['id']}/commit/", {})
    response, data = call(
        live_asgi, "GET", f"/api/v1/dataset-versions/{version['id']}/download/?path=data.bin", token=token
    )
    assert response.status == 200
    assert hashlib.sha256(data).hexdigest() == hashlib.sha256(content).hexdigest()


def test_a_client_that_stalls_mid_chunk_loses_the_chunk_and_the_lock(world, live_asgi, monkeypatch):
    from django.core.handlers.asgi import ASGIRequest

    monkeypatch.setattr(ASGIRequest, "body_receive_timeout", 0.5)
    token = make_token(world.alice)
    content = content_of(2 * MIB)
    _session, url = new_upload(live_asgi, token, world.project_a, world.alice, content)
    sock = socket.create_connection((live_asgi.host, live_asgi.port))
    head = (
        f"PATCH {url} HTTP/1.1\r\nHost: {live_asgi.host}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/offset+octet-stream\r\nUpload-Offset: 0\r\nContent-Length: {MIB}\r\n\r\n"
    ).encode()
    try:
        sock.sendall(head + content[: MIB // 2])  # then nothing, and the connection stays open
        deadline = time.monotonic() + 10
        while staged_size(url) == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert staged_size(url) > 0
        response, data = patch(live_asgi, url, 0, content, token)  # waits for the stalled chunk, then goes on
        assert response.status == 200, data
        assert json.loads(data)["complete"] is True
    finally:
        sock.close()


def test_a_streamed_chunk_with_a_wrong_checksum_is_refused_and_dropped(world, live_asgi):
    token = make_token(world.alice)
    content = content_of(6 * MIB)
    _session, url = new_upload(live_asgi, token, world.project_a, world.alice, content)
    wrong = base64.b64encode(hashlib.sha256(b"other").digest()).decode()
    response, data = patch(live_asgi, url, 0, content, token, **{"Upload-Checksum": f"sha256 {wrong}"})
    assert response.status == 400
    assert b"does not match its Upload-Checksum" in data
    assert staged_size(url) == 0
    right = base64.b64encode(hashlib.sha256(content).digest()).decode()
    response, data = patch(live_asgi, url, 0, content, token, **{"Upload-Checksum": f"sha256 {right}"})
    assert response.status == 200, data
    assert json.loads(data)["complete"] is True


def test_a_file_whose_sha256_does_not_match_is_discarded(world, live_asgi):
    token = make_token(world.alice)
    content = content_of(5 * MIB)
    _session, url = new_upload(live_asgi, token, world.project_a, world.alice, content, sha256="0" * 64)
    response, data = patch(live_asgi, url, 0, content, token)
    assert response.status == 400
    assert b"Checksum mismatch" in data
    assert staged_size(url) == 0
    assert not Blob.objects.exists()


def test_an_anonymous_chunk_is_401_and_writes_nothing(world, live_asgi):
    token = make_token(world.alice)
    content = content_of(5 * MIB)
    _session, url = new_upload(live_asgi, token, world.project_a, world.alice, content)
    response, _data = patch(live_asgi, url, 0, content, token=None)
    assert response.status == 401
    response, _data = patch(live_asgi, url, 0, content, token="not-a-token")
    assert response.status == 401
    assert staged_size(url) == 0


def test_another_projects_upload_is_404_and_a_read_only_token_403(world, live_asgi):
    token = make_token(world.alice)
    content = content_of(1 * MIB)
    _session, url = new_upload(live_asgi, token, world.project_a, world.alice, content)
    response, _data = patch(live_asgi, url, 0, content, make_token(world.charlie))
    assert response.status == 404
    response, _data = patch(live_asgi, url, 0, content, make_token(world.alice, scope="read"))
    assert response.status == 403
    add_member(world.project_b, world.alice, Role.EDITOR)
    project_token = make_token(world.alice, project=world.project_b)  # limited to another project of hers
    assert patch(live_asgi, url, 0, content, project_token)[0].status == 404
    assert staged_size(url) == 0


def test_session_auth_needs_the_csrf_token_on_the_streamed_route(world, live_asgi):
    token = make_token(world.alice)
    content = content_of(1 * MIB)
    _session, url = new_upload(live_asgi, token, world.project_a, world.alice, content)
    browser = DjangoClient()
    browser.force_login(world.bob)  # a member of project A
    csrf = secrets.token_hex(16)  # 32 characters: an unmasked secret
    cookie = f"{settings.SESSION_COOKIE_NAME}={browser.cookies[settings.SESSION_COOKIE_NAME].value}; csrftoken={csrf}"
    response, data = patch(live_asgi, url, 0, content, None, Cookie=cookie)
    assert response.status == 403
    assert b"CSRF" in data
    response, data = patch(live_asgi, url, 0, content, None, Cookie=cookie, **{"X-CSRFToken": csrf})
    assert response.status == 200, data
    assert json.loads(data)["complete"] is True


def test_a_chunk_at_the_wrong_offset_is_409_with_the_real_offset(world, live_asgi):
    token = make_token(world.alice)
    content = content_of(3 * MIB)
    _session, url = new_upload(live_asgi, token, world.project_a, world.alice, content)
    assert patch(live_asgi, url, 0, content[:MIB], token)[0].status == 200
    response, data = patch(live_asgi, url, 0, content[:MIB], token)  # a retry of a stored chunk
    assert response.status == 409
    assert response.getheader("Upload-Offset") == str(MIB)
    assert json.loads(data)["offset"] == MIB
    assert staged_size(url) == MIB


def test_nothing_stays_in_staging_after_an_abort(world, live_asgi):
    token = make_token(world.alice)
    content = content_of(6 * MIB)
    session, url = new_upload(live_asgi, token, world.project_a, world.alice, content)
    assert patch(live_asgi, url, 0, content[: 5 * MIB], token)[0].status == 200
    folder = uploads.session_dir(UploadFile.objects.get(pk=url.rstrip("/").rsplit("/", 1)[1]).session)
    assert any(folder.iterdir())
    response, _data = call(live_asgi, "DELETE", f"/api/v1/dataset-uploads/{session['id']}/", token=token)
    assert response.status == 204
    assert not folder.exists()
    assert not list(uploads.staging_dir().iterdir())
    assert not DatasetVersion.objects.exists()


def test_chunks_are_not_spooled_before_the_view_runs(world, live_asgi, monkeypatch):
    """Only PATCH on the chunk route bypasses Django's spooled body; that is the point of the route."""
    import django.core.handlers.asgi as django_asgi

    token = make_token(world.alice)
    content = content_of(5 * MIB)
    _session, url = new_upload(live_asgi, token, world.project_a, world.alice, content)

    def no_spool(*args, **kwargs):
        raise AssertionError("the chunk body was spooled")

    monkeypatch.setattr(django_asgi.tempfile, "SpooledTemporaryFile", no_spool)
    response, data = patch(live_asgi, url, 0, content, token)
    assert response.status == 200, data
    assert UploadFile.objects.get(pk=url.rstrip("/").rsplit("/", 1)[1]).blob_id == hashlib.sha256(content).hexdigest()


@pytest.mark.parametrize(
    ("method", "path", "streamed"),
    [
        ("PATCH", "/api/v1/dataset-upload-files/0b9a53a5-54a9-4c8e-9a55-6f1b3e7b0f4e/", True),
        ("HEAD", "/api/v1/dataset-upload-files/0b9a53a5-54a9-4c8e-9a55-6f1b3e7b0f4e/", False),
        ("GET", "/api/v1/dataset-upload-files/0b9a53a5-54a9-4c8e-9a55-6f1b3e7b0f4e/", False),
        ("PATCH", "/api/v1/datasets/1/", False),
        ("PATCH", "/api/v1/dataset-upload-files/", False),
    ],
)
def test_only_patch_on_the_chunk_route_is_streamed(method, path, streamed):
    scope = {"type": "http", "method": method, "path": path, "root_path": ""}
    assert (method == "PATCH" and ChunkUploadRoute.is_chunk_route(scope)) is streamed
