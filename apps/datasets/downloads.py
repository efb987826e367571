"""Streamed downloads: one file of a version, or the whole version as a zip built on the fly (kept streaming
under ASGI by portal.lib.streaming)."""

from __future__ import annotations

import mimetypes
import posixpath
import re
import zipfile
from collections.abc import Iterator

from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.utils.translation import gettext as _

from apps.datasets import blobs
from apps.datasets.models import DatasetVersion, VersionFile


def get_file(version: DatasetVersion, path: str) -> VersionFile:
    entry = version.files.filter(path=path).first()
    if entry is None:
        raise Http404(_("No file “%(path)s” in this version.") % {"path": path})
    return entry


def _attachment(name: str) -> str:
    from django.utils.http import content_disposition_header

    return content_disposition_header(True, name)


OPEN_RANGE = re.compile(r"bytes=(\d+)-$")


def file_response(request: HttpRequest, version: DatasetVersion, path: str) -> HttpResponse:
    """One file; `Range: bytes=N-` (the only form asked for: a download that stopped continues from byte N) answers
    206 with the rest, a start past the end 416. Any other Range header is ignored (200, the whole file), as RFC 9110
    allows."""
    entry = get_file(version, path)
    content_type = mimetypes.guess_type(entry.path)[0] or "application/octet-stream"
    start = 0
    wanted = OPEN_RANGE.match(request.headers.get("Range", "").strip())
    if wanted is not None:
        start = int(wanted.group(1))
        if start >= entry.size and entry.size:
            refused = HttpResponse(status=416)
            refused["Content-Range"] = f"bytes */{entry.size}"
            return refused
    response = StreamingHttpResponse(blobs.open_chunks(entry.blob_id, start=start), content_type=content_type)
    if wanted is not None and entry.size:
        response.status_code = 206
        response["Content-Range"] = f"bytes {start}-{entry.size - 1}/{entry.size}"
    response["Content-Length"] = str(entry.size - start)
    response["Accept-Ranges"] = "bytes"
    response["Content-Disposition"] = _attachment(posixpath.basename(entry.path))
    response["ETag"] = f'"{entry.blob_id}"'
    response["X-Content-SHA256"] = entry.blob_id
    return response


class _Sink:
    """A write-only, non-seekable file for ZipFile; what it receives is drained after each write."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.position = 0

    def write(self, data: bytes) -> int:
        self.parts.append(bytes(data))
        self.position += len(data)
        return len(data)

    def tell(self) -> int:
        return self.position

    def flush(self) -> None:
        pass

    def drain(self) -> bytes:
        data = b"".join(self.parts)
        self.parts.clear()
        return data


def zip_stream(entries: list[tuple[str, str, int]], date_time: tuple) -> Iterator[bytes]:
    """A zip (stored, zip64 where needed) of [(path, sha256, size)], produced as it is sent."""
    sink = _Sink()
    with zipfile.ZipFile(sink, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:  # type: ignore[arg-type]
        for path, sha, size in entries:
            info = zipfile.ZipInfo(path, date_time=date_time)
            info.file_size = size
            with zf.open(info, mode="w", force_zip64=size > 2**31) as dest:
                for block in blobs.open_chunks(sha):
                    dest.write(block)
                    yield sink.drain()
            yield sink.drain()
    yield sink.drain()


def zip_response(request: HttpRequest, version: DatasetVersion) -> StreamingHttpResponse:
    entries = list(version.files.values_list("path", "blob_id", "size"))
    chunks = zip_stream(entries, version.created_at.timetuple()[:6])
    response = StreamingHttpResponse(chunks, content_type="application/zip")
    response["Content-Disposition"] = _attachment(f"{version.dataset.name}-v{version.number}.zip")
    return response


def thumbnail_response(request: HttpRequest, version: DatasetVersion, path: str) -> StreamingHttpResponse:
    from apps.datasets import analysis

    entry = get_file(version, path)
    st = blobs.storage()
    name = analysis.thumbnail_name(entry.blob_id)
    if not st.exists(name):
        if analysis.kind_of(entry.path) != "image":
            raise Http404(_("No thumbnail for this file."))
        analysis.preview_image(entry.blob_id, entry.size)

    def chunks() -> Iterator[bytes]:
        with st.open(name, "rb") as fh:
            yield fh.read()

    response = StreamingHttpResponse(chunks(), content_type="image/png")
    response["Cache-Control"] = "private, max-age=86400"
    return response
