"""The content-addressed blob store on `storages["datasets"]` (filesystem by default, S3 through django-storages).

A blob is named by the SHA-256 of its content (`blobs/ab/cd/abcd…`), so identical files are stored once.
Everything streams in `CHUNK` pieces: no file is ever held whole in memory.
"""

from __future__ import annotations

import contextlib
import ctypes
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


SYNC_FILE_RANGE_WRITE = 2


def _load_sync_file_range():
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range  # Linux (glibc, musl)
    except (AttributeError, OSError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_sync_file_range = _load_sync_file_range()


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to start writing these bytes to disk now, without waiting (sync_file_range(2)).

    A staged upload is fsynced before it becomes a blob; starting each chunk's write-out as it lands lets the
    disk work while the next chunks arrive, so that fsync finds little left to do. Best effort: a no-op
    where the call does not exist.
    """
    if _sync_file_range is not None and length > 0:
        _sync_file_range(fd, offset, length, SYNC_FILE_RANGE_WRITE)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def open_chunks(sha256: str, chunk: int = CHUNK, start: int = 0) -> Iterator[bytes]:
    """The blob's content from byte `start` on, as a stream of chunks (S3: straight from the response body, never
    buffered whole)."""
    st = storage()
    name = blob_storage_name(sha256)
    if isinstance(st, FileSystemStorage):
        with open(st.path(name), "rb") as fh:
            fh.seek(start)
            while block := fh.read(chunk):
                yield block
        return
    bucket = getattr(st, "bucket", None)
    if bucket is not None:  # django-storages S3: S3File would spool the whole object first
        ranged = {"Range": f"bytes={start}-"} if start else {}
        body = bucket.Object(st._normalize_name(name)).get(**ranged)["Body"]
        try:
            yield from body.iter_chunks(chunk)
        finally:
            body.close()
        return
    with st.open(name, "rb") as fh:
        fh.seek(start)
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
