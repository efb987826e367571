"""A connection killed in the middle of a chunk, against the real ASGI server: resume, commit, download."""

from __future__ import annotations

import hashlib
import http.client
import json
import socket

import pytest

from apps.datasets.models import DatasetVersion
from tests.factories import dataset, make_token

pytestmark = pytest.mark.live


def _request(server, token, method, path, body=b"", headers=None):
    conn = http.client.HTTPConnection(server.host, server.port, timeout=30)
    conn.request(method, path, body=body, headers={"Authorization": f"Bearer {token}", **(headers or {})})
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response, data


def _json(server, token, method, path, payload):
    response, data = _request(
        server, token, method, path, json.dumps(payload).encode(), {"Content-Type": "application/json"}
    )
    assert response.status in (200, 201), data
    return json.loads(data)


def test_an_upload_resumes_after_the_connection_is_killed_mid_chunk(world, live_asgi):
    token = make_token(world.alice)
    ds = dataset(world.project_a, world.alice)
    content = bytes(range(256)) * 4096 * 8  # 8 MiB
    digest = hashlib.sha256(content).hexdigest()
    session = _json(live_asgi, token, "POST", "/api/v1/dataset-uploads/", {"project": "project-a", "dataset": ds.pk})
    upload = _json(
        live_asgi, token, "POST", f"/api/v1/dataset-uploads/{session['id']}/files/",
        {"path": "blob.bin", "size": len(content), "sha256": digest},
    )  # fmt: skip
    url = f"/api/v1/dataset-upload-files/{upload['id']}/"
    first = 5_000_000  # over THREAD_MIN: hashed in a second thread while it is written
    response, _ = _request(
        live_asgi, token, "PATCH", url, content[:first],
        {"Content-Type": "application/offset+octet-stream", "Upload-Offset": "0"},
    )  # fmt: skip
    assert response.status == 200

    # Announce a 400 kB chunk, send half of it, and drop the connection.
    sock = socket.create_connection((live_asgi.host, live_asgi.port))
    head = (
        f"PATCH {url} HTTP/1.1\r\nHost: {live_asgi.host}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/offset+octet-stream\r\nUpload-Offset: {first}\r\n"
        f"Content-Length: 400000\r\n\r\n"
    ).encode()
    sock.sendall(head + content[first : first + 200_000])
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST
    sock.close()

    response, _ = _request(live_asgi, token, "HEAD", url)
    offset = int(response.getheader("Upload-Offset"))
    assert first <= offset < first + 400_000  # nothing past what arrived whole
    assert not DatasetVersion.objects.exists()
    while offset < len(content):
        response, data = _request(
            live_asgi, token, "PATCH", url, content[offset : offset + 250_000],
            {"Content-Type": "application/offset+octet-stream", "Upload-Offset": str(offset)},
        )  # fmt: skip
        assert response.status == 200, data
        offset = json.loads(data)["offset"]
    version = _json(live_asgi, token, "POST", f"/api/v1/dataset-uploads/{session['id']}/commit/", {})
    response, data = _request(
        live_asgi, token, "GET", f"/api/v1/dataset-versions/{version['id']}/download/?path=blob.bin"
    )
    assert response.status == 200
    assert hashlib.sha256(data).hexdigest() == digest


def test_big_chunks_are_checked_before_they_count(world, live_asgi):
    """Chunks from THREAD_MIN on are hashed in a second thread while they are written: checksums hold there too."""
    import base64

    token = make_token(world.alice)
    ds = dataset(world.project_a, world.alice)
    content = bytes(range(256)) * 4096 * 5  # 5 MiB
    session = _json(live_asgi, token, "POST", "/api/v1/dataset-uploads/", {"project": "project-a", "dataset": ds.pk})
    upload = _json(
        live_asgi, token, "POST", f"/api/v1/dataset-uploads/{session['id']}/files/",
        {"path": "b.bin", "size": len(content), "sha256": hashlib.sha256(content).hexdigest()},
    )  # fmt: skip
    url = f"/api/v1/dataset-upload-files/{upload['id']}/"
    headers = {"Content-Type": "application/offset+octet-stream", "Upload-Offset": "0"}
    wrong = base64.b64encode(hashlib.sha256(b"other").digest()).decode()
    response, data = _request(
        live_asgi, token, "PATCH", url, content, {**headers, "Upload-Checksum": f"sha256 {wrong}"}
    )
    assert response.status == 400
    assert b"does not match its Upload-Checksum" in data
    response, _ = _request(live_asgi, token, "HEAD", url)
    assert response.getheader("Upload-Offset") == "0"
    right = base64.b64encode(hashlib.sha256(content).digest()).decode()
    response, data = _request(
        live_asgi, token, "PATCH", url, content, {**headers, "Upload-Checksum": f"sha256 {right}"}
    )
    assert response.status == 200, data
    assert json.loads(data)["complete"] is True


def test_a_pipelining_client_gets_its_chunks_stored_in_order(world, live_asgi, tmp_path):
    """The next chunk arrives while the previous one is still being stored: it waits for it, in order."""
    from apps.datasets.publish import Client

    token = make_token(world.alice)
    ds = dataset(world.project_a, world.alice)
    source = tmp_path / "big.bin"
    source.write_bytes(bytes(range(256)) * 4096 * 20)  # 20 MiB: four 5 MiB chunks, each hashed while written
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    client = Client(f"{live_asgi.url}/api/v1/", token)
    try:
        session = client.json("POST", "dataset-uploads/", {"project": "project-a", "dataset": ds.pk})
        upload = client.json(
            "POST", f"dataset-uploads/{session['id']}/files/",
            {"path": "big.bin", "size": source.stat().st_size, "sha256": digest},
        )  # fmt: skip
        done = client.send_file(upload, source, chunk=5 * 2**20, pipeline=3)
        assert done["complete"] is True
        version = client.json("POST", f"dataset-uploads/{session['id']}/commit/", {})
    finally:
        client.close()
    assert DatasetVersion.objects.get(pk=version["id"]).files.get().blob_id == digest
