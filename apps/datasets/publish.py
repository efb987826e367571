"""Publish a directory as a new dataset version, from task code or a shell, over the portal's API.

    python -m apps.datasets.publish DATASET DIRECTORY [--message TEXT] [--project SLUG] [--create]

Reads PORTAL_API_URL and PORTAL_API_TOKEN (both set for every pipeline task) and PORTAL_PROJECT (or --project).
Files go up in resumable chunks with their SHA-256; a dropped connection resumes from the server's offset.
With a task's token the portal records the lineage: which run and task wrote the version.

Standard library only, so it runs in any task environment. `Client` is also what bench/datasets.py uses.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

# Each chunk is one request, and each request pays the API's per-request work (token, tenant queryset, object
# permission, a database connection: ~15 ms of the web process's CPU on the 2-core bench machine): 64 MiB halves
# what 32 MiB paid on a 2 GiB file. The server's memory does not grow with it (apps/datasets/asgi.py buffers
# 4 MiB per request); this client holds one chunk-sized buffer, and a dropped connection re-sends one chunk.
CHUNK = 64 * 1024 * 1024


class PublishError(RuntimeError):
    pass


class Client:
    """A minimal API client: JSON calls and chunked uploads over one keep-alive connection."""

    def __init__(self, base_url: str, token: str, timeout: float = 300) -> None:
        parsed = urllib.parse.urlsplit(base_url)
        self.scheme, self.netloc = parsed.scheme, parsed.netloc
        api = parsed.path.rstrip("/")
        self.api = api if api.endswith("/api/v1") else f"{api}/api/v1"  # PORTAL_API_URL ends in /api/v1/
        self.token, self.timeout = token, timeout
        self.conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        if self.conn is None:
            cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
            self.conn = cls(self.netloc, timeout=self.timeout)
        return self.conn

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def request(
        self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        if "://" in path:  # an absolute URL the server gave (upload_url)
            parts = urllib.parse.urlsplit(path)
            url = parts.path + (f"?{parts.query}" if parts.query else "")
        else:
            url = f"{self.api}/{path.lstrip('/')}"
        all_headers = {"Authorization": f"Bearer {self.token}", **(headers or {})}
        for attempt in range(2):  # a stale keep-alive connection gets one retry
            conn = self._connection()
            try:
                conn.request(method, url, body=body, headers=all_headers)
                response = conn.getresponse()
                data = response.read()
                return response.status, {k.lower(): v for k, v in response.getheaders()}, data
            except (ConnectionError, http.client.HTTPException, TimeoutError, OSError):
                self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def json(self, method: str, path: str, payload: Any = None, ok: tuple[int, ...] = (200, 201)) -> Any:
        body = json.dumps(payload).encode() if payload is not None else None
        status, _headers, data = self.request(method, path, body, {"Content-Type": "application/json"})
        if status not in ok:
            raise PublishError(f"{method} {path} → {status}: {data.decode(errors='replace')[:500]}")
        return json.loads(data) if data else None

    def offset(self, upload_url: str) -> int:
        status, headers, _data = self.request("HEAD", upload_url)
        if status != 200:
            raise PublishError(f"HEAD {upload_url} → {status}")
        return int(headers["upload-offset"])

    def _new_connection(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        return cls(self.netloc, timeout=self.timeout)

    def send_file(self, upload: dict, source: Path, chunk: int = CHUNK, retries: int = 8, pipeline: int = 2) -> dict:
        """PATCH `source` in chunks from the server's offset; resumes after connection errors.

        With `pipeline` > 1 the next chunk is sent on another connection while the server still verifies and
        stores the previous one (the server handles them in order; any conflict is answered 409 and the
        client carries on from the offset the server reports).
        """
        url = upload["upload_url"]
        path = urllib.parse.urlsplit(url).path
        size = source.stat().st_size
        offset = upload["offset"]
        if size == 0:
            status, _headers, body = self.request(
                "PATCH", url, b"", {"Content-Type": "application/offset+octet-stream", "Upload-Offset": "0"}
            )
            if status != 200:
                raise PublishError(f"PATCH {url} → {status}: {body.decode(errors='replace')[:500]}")
            return json.loads(body)
        failures = 0
        conns = [self._new_connection() for _ in range(max(pipeline, 1))]
        try:
            with source.open("rb") as fh:
                while offset < size:
                    try:
                        upload, offset = self._send_chunks(conns, path, fh, offset, size, chunk)
                        failures = 0
                    except (OSError, http.client.HTTPException):
                        failures += 1
                        if failures > retries:
                            raise
                        for conn in conns:
                            conn.close()
                        time.sleep(min(2**failures, 30) / 10)
                        offset = self.offset(url)
        finally:
            for conn in conns:
                conn.close()
        if not upload.get("complete"):  # the last answer we read was not the last chunk's
            upload = self.json("GET", url)
        return upload

    def _send_chunks(self, conns, path: str, fh, offset: int, size: int, chunk: int) -> tuple[dict, int]:
        inflight: list[http.client.HTTPConnection] = []
        next_offset, turn, upload = offset, 0, {}
        # One buffer for every chunk: request() returns once the body is sent, so it is free again, and a
        # fresh chunk-sized bytes object per chunk would cost its page faults each time.
        buffer = memoryview(bytearray(min(chunk, size - offset)))
        while next_offset < size or inflight:
            if next_offset < size and len(inflight) < len(conns):
                conn = conns[turn % len(conns)]
                turn += 1
                fh.seek(next_offset)
                data = buffer[: fh.readinto(buffer[: min(chunk, size - next_offset)])]
                if not data:
                    raise PublishError(f"{fh.name} is shorter than {size} bytes")
                headers = {
                    "Authorization": f"Bearer {self.token}",
                    "Content-Type": "application/offset+octet-stream",
                    "Upload-Offset": str(next_offset),
                }
                conn.request("PATCH", path, body=data, headers=headers)
                inflight.append(conn)
                next_offset += len(data)
                continue
            response = inflight.pop(0).getresponse()
            body = response.read()
            if response.status == 200:
                upload = json.loads(body)
                offset = upload["offset"]
                continue
            server_offset = int(response.getheader("Upload-Offset") or offset)
            for conn in inflight:  # out of step: drain, then go on from the server's offset
                other = conn.getresponse()
                other_body = other.read()
                if other.status == 200 and json.loads(other_body)["offset"] > server_offset:
                    upload = json.loads(other_body)
                    server_offset = upload["offset"]
            inflight.clear()
            if response.status != 409:
                raise PublishError(f"PATCH {path} → {response.status}: {body.decode(errors='replace')[:500]}")
            offset = next_offset = server_offset
        return upload, offset


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(1024 * 1024):
            digest.update(block)
    return digest.hexdigest()


def publish(
    client: Client, project: str, dataset: str, directory: Path, *, message: str = "", create: bool = False
) -> dict:
    """Upload every file under `directory` and commit them as the dataset's next version; returns it."""
    query = urllib.parse.urlencode({"project": project, "name": dataset})
    found = client.json("GET", f"datasets/?{query}")["results"]
    if found:
        dataset_id = found[0]["id"]
    elif create:
        dataset_id = client.json("POST", "datasets/", {"project": project, "name": dataset})["id"]
    else:
        raise PublishError(f"no dataset “{dataset}” in project “{project}” (use --create)")
    files = sorted(p for p in directory.rglob("*") if p.is_file() and not p.is_symlink())
    if not files:
        raise PublishError(f"{directory} has no files")
    session = client.json("POST", "dataset-uploads/", {"project": project, "dataset": dataset_id, "message": message})
    for path in files:
        rel = path.relative_to(directory).as_posix()
        upload = client.json(
            "POST",
            f"dataset-uploads/{session['id']}/files/",
            {"path": rel, "size": path.stat().st_size, "sha256": sha256_of(path)},
        )
        client.send_file(upload, path)
    return client.json("POST", f"dataset-uploads/{session['id']}/commit/", {})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m apps.datasets.publish", description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("directory", type=Path)
    parser.add_argument("--message", "-m", default="")
    parser.add_argument("--project", default=os.environ.get("PORTAL_PROJECT", ""))
    parser.add_argument("--create", action="store_true", help="Create the dataset when it does not exist.")
    args = parser.parse_args(argv)
    url, token = os.environ.get("PORTAL_API_URL"), os.environ.get("PORTAL_API_TOKEN")
    if not url or not token or not args.project:
        parser.error("PORTAL_API_URL, PORTAL_API_TOKEN and PORTAL_PROJECT (or --project) are required")
    client = Client(url, token)
    try:
        version = publish(client, args.project, args.dataset, args.directory, message=args.message, create=args.create)
    except PublishError as exc:
        print(f"publish failed: {exc}", file=sys.stderr)
        return 1
    finally:
        client.close()
    print(f"published {version['ref']} ({version['file_count']} files, digest {version['digest']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
