"""The content-addressed blob store on `storages["datasets"]` (filesystem by default, S3 through django-storages).

A blob is named by the SHA-256 of its content (`blobs/ab/cd/abcd…`), so identical files are stored once.
Everything streams in `CHUNK` pieces: no file is ever held whole in memory.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

from django.core.files import File
from django.core.files.storage import FileSystemStorage, Storage, storages

from apps.datasets.models import Blob, blob_storage_name

CHUNK = 1024 * 1024


def storage() -> Storage:
    """Looked up on every use: tests (and settings changes) swap the backend."""
    return storages["datasets"]


def local_path(sha256: str) -> Path | None:
    """The blob's file on this machine when the store is a filesystem, else None."""
    st = storage()
    if isinstance(st, FileSystemStorage):
        return Path(st.path(blob_storage_name(sha256)))
    return None


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def put(source: Path, sha256: str, size: int, *, move: bool = False) -> tuple[Blob, bool]:
    """Store the file at `source` as blob `sha256` unless it is there already; returns (blob, created).

    On a filesystem store `move` renames (or hard-links) instead of copying: an upload that finishes costs
    no second write of its bytes. The file appears under its final name atomically.
    """
    st = storage()
    name = blob_storage_name(sha256)
    created = False
    if not st.exists(name):
        created = True
        if isinstance(st, FileSystemStorage):
            dest = Path(st.path(name))
            dest.parent.mkdir(parents=True, exist_ok=True)
            _fsync(source)  # durable before any version can point at it
            tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex}")
            try:
                if move:
                    os.replace(source, tmp)
                else:
                    os.link(source, tmp)
            except OSError:  # another device: copy
                shutil.copyfile(source, tmp)
                if move:
                    source.unlink(missing_ok=True)
            os.chmod(tmp, 0o444)
            os.replace(tmp, dest)
        else:
            with source.open("rb") as fh:
                st.save(name, File(fh, name=name))
    if move and source.exists():
        source.unlink()
    blob, _ = Blob.objects.get_or_create(sha256=sha256, defaults={"size": size})
    return blob, created


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def open_chunks(sha256: str, chunk: int = CHUNK) -> Iterator[bytes]:
    """The blob's content as a stream of chunks (S3: straight from the response body, never buffered whole)."""
    st = storage()
    name = blob_storage_name(sha256)
    if isinstance(st, FileSystemStorage):
        with open(st.path(name), "rb") as fh:
            while block := fh.read(chunk):
                yield block
        return
    bucket = getattr(st, "bucket", None)
    if bucket is not None:  # django-storages S3: S3File would spool the whole object first
        body = bucket.Object(st._normalize_name(name)).get()["Body"]
        try:
            yield from body.iter_chunks(chunk)
        finally:
            body.close()
        return
    with st.open(name, "rb") as fh:
        while block := fh.read(chunk):
            yield block


def copy_to(sha256: str, dest: Path) -> None:
    """Put the blob's content at `dest`: a hard link on a filesystem store, else a streamed download."""
    src = local_path(sha256)
    if src is not None:
        try:
            os.link(src, dest)
            return
        except OSError:
            shutil.copyfile(src, dest)
            return
    with dest.open("wb") as out:
        for block in open_chunks(sha256):
            out.write(block)


def delete(sha256: str) -> None:
    st = storage()
    with contextlib.suppress(FileNotFoundError):
        st.delete(blob_storage_name(sha256))


def exists(sha256: str) -> bool:
    return storage().exists(blob_storage_name(sha256))
