"""Resumable uploads (tus-like): a session, its files, offset-checked chunks, and the atomic commit.

A file's bytes go to a partial file under the staging folder; the partial file's length is the upload offset,
so a connection killed mid-chunk loses at most that chunk and the client resumes from `offset`. A finished file
is verified against its SHA-256 and moved into the blob store. Nothing is visible until `commit_upload`
creates the version in one transaction; open sessions that go stale are removed by `tasks.cleanup_uploads`.
"""

from __future__ import annotations

import base64
import binascii
import fcntl
import hashlib
import queue
import re
import shutil
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import NamedTuple

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from apps.datasets import archives, blobs
from apps.datasets.models import Dataset, DatasetVersion, UploadFile, UploadSession, UploadStatus
from apps.datasets.paths import clean_path
from apps.datasets.quota import check_quota

SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
READ_BLOCK = 1024 * 1024
THREAD_MIN = 4 * 1024 * 1024  # chunks from this size on are hashed in a second thread while they are written
CHUNK_WAIT = 2.0  # seconds a chunk from ahead waits without the file growing before it is refused (409)


class OffsetConflict(Exception):
    """The chunk does not start where the stored bytes end (answered 409 with the real offset)."""

    def __init__(self, offset: int, message: str) -> None:
        super().__init__(message)
        self.offset = offset


def staging_dir() -> Path:
    return Path(getattr(settings, "DATASETS_UPLOAD_DIR", settings.VAR_DIR / "uploads"))


def session_dir(session: UploadSession) -> Path:
    return staging_dir() / str(session.pk)


def partial_path(upload: UploadFile) -> Path:
    return staging_dir() / str(upload.session_id) / f"{upload.pk}.part"


def max_file_size() -> int:
    return int(getattr(settings, "DATASETS_MAX_FILE_BYTES", 1 << 40))


# --- Sessions and files ------------------------------------------------------------------------


def start_upload(
    dataset: Dataset, user, *, message: str = "", base: DatasetVersion | None = None, task_run=None
) -> UploadSession:
    """An open upload session; the version it commits starts from `base`'s files (None: from nothing)."""
    if base is not None and base.dataset_id != dataset.pk:
        raise ValidationError({"base": [_("That version belongs to another dataset.")]})
    session = UploadSession.objects.create(
        project=dataset.project, dataset=dataset, base=base, message=message, created_by=user, task_run=task_run
    )
    session_dir(session).mkdir(parents=True, exist_ok=True)
    return session


def _require_open(session: UploadSession) -> None:
    if session.status == UploadStatus.COMMITTED:
        raise ValidationError({"status": [_("This upload was committed already; start a new one.")]})
    if session.status != UploadStatus.OPEN:
        raise ValidationError({"status": [_("This upload was aborted; start a new one.")]})


def add_file(session: UploadSession, *, path: str, size: int, sha256: str = "", archive: bool = False) -> UploadFile:
    """Announce a file (or an archive to expand under `path`, "" for the top) before sending its bytes."""
    _require_open(session)
    path = (clean_path(path) if path not in ("", ".") else "") if archive else clean_path(path)
    if not isinstance(size, int) or size < 0:
        raise ValidationError({"size": [_("Give the file size in bytes.")]})
    if size > max_file_size():
        raise ValidationError({"size": [_("Files over %(n)s bytes are not accepted.") % {"n": max_file_size()}]})
    sha256 = (sha256 or "").lower()
    if sha256 and not SHA256_RE.match(sha256):
        raise ValidationError({"sha256": [_("Give the SHA-256 as 64 hexadecimal digits.")]})
    key = path or "."
    if session.files.filter(path=key).exists():
        raise ValidationError({"path": [_("“%(path)s” is already part of this upload.") % {"path": key}]})
    check_quota(session.project, size)
    upload = UploadFile.objects.create(session=session, path=key, size=size, sha256=sha256, archive=archive)
    partial_path(upload).parent.mkdir(parents=True, exist_ok=True)
    partial_path(upload).touch()
    UploadSession.objects.filter(pk=session.pk).update(updated_at=timezone.now())
    return upload


def remove_file(upload: UploadFile) -> None:
    _require_open(upload.session)
    partial_path(upload).unlink(missing_ok=True)
    upload.delete()


# The running SHA-256 of files being uploaded through this process, so that the end of an upload needs no
# second read. Keyed by file id with the offset it has reached; any gap (another process took a chunk, a
# restart) falls back to hashing the partial file once.
_HASHERS: OrderedDict[str, tuple[int, object]] = OrderedDict()
_HASHERS_LOCK = threading.Lock()
_HASHERS_MAX = 64


def _take_hasher(upload: UploadFile, offset: int):
    with _HASHERS_LOCK:
        entry = _HASHERS.pop(str(upload.pk), None)
    if entry is not None and entry[0] == offset:
        return entry[1]
    if offset == 0:
        return hashlib.sha256()
    return None


def _keep_hasher(upload: UploadFile, offset: int, hasher) -> None:
    with _HASHERS_LOCK:
        _HASHERS[str(upload.pk)] = (offset, hasher)
        while len(_HASHERS) > _HASHERS_MAX:
            _HASHERS.popitem(last=False)


def parse_checksum(header: str | None) -> bytes | None:
    """tus' `Upload-Checksum: sha256 <base64>` (the chunk's digest)."""
    if not header:
        return None
    algo, _sep, value = header.strip().partition(" ")
    if algo.lower() != "sha256":
        raise ValidationError({"checksum": [_("Only sha256 chunk checksums are supported.")]})
    try:
        return base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValidationError({"checksum": [_("The chunk checksum is not valid base64.")]}) from exc


def write_chunk(
    upload: UploadFile,
    offset: int,
    read: Callable[[int], bytes],
    length: int | None,
    checksum: bytes | None = None,
) -> UploadFile:
    """Append the bytes `read()` yields at `offset`; finish the file when it is complete.

    `read` is the request body as it arrives (apps.datasets.asgi streams it: nothing is spooled first), so
    each byte is written once, to the partial file, and hashed on the way. A chunk that is cut off, too long
    or whose checksum does not match is dropped whole.
    """
    _require_open(upload.session)
    if upload.blob_id is not None or (upload.archive and upload.offset >= upload.size and upload.size > 0):
        raise OffsetConflict(upload.offset, _("This file is complete already."))
    part = partial_path(upload)
    if not part.exists():
        raise ValidationError({"file": [_("This upload was cleaned up; start a new one.")]})
    with part.open("r+b", buffering=0) as fh:
        stored = _lock_at(fh, offset, lambda: _committed_offset(upload))
        room = upload.size - stored
        if length is not None and length > room:
            raise ValidationError(
                {
                    "chunk": [
                        _("The chunk would go past the declared file size (%(size)d bytes).") % {"size": upload.size}
                    ]
                }
            )
        hasher = _take_hasher(upload, stored)
        before = hasher.copy() if hasher is not None else None  # kept if this chunk is dropped
        chunk_hash = hashlib.sha256() if checksum is not None else None
        hashers = [h for h in (hasher, chunk_hash) if h is not None]
        try:
            fh.seek(stored)
            written = _write_hashing(read, fh, room if length is None else length, hashers)
            if length is not None and written < length:
                raise ValidationError({"chunk": [_("The chunk is shorter than its Content-Length.")]})
            if length is None and read(1):
                raise ValidationError(
                    {
                        "chunk": [
                            _("The chunk goes past the declared file size (%(size)d bytes).") % {"size": upload.size}
                        ]
                    }
                )
            if chunk_hash is not None and chunk_hash.digest() != checksum:
                raise ValidationError(
                    {"checksum": [_("The chunk's SHA-256 does not match its Upload-Checksum; it was discarded.")]}
                )
        except BaseException:
            fh.truncate(stored)  # an unverified, overlong or cut-off chunk never counts
            if before is not None and stored < upload.size:
                _keep_hasher(upload, stored, before)  # a retry from here still needs no re-read
            raise
        new_offset = stored + written
        blobs.start_writeback(fh.fileno(), stored, written)
        # Still under the lock: the next chunk's request finds the offset and the running hash up to date.
        UploadFile.objects.filter(pk=upload.pk).update(offset=new_offset)
        UploadSession.objects.filter(pk=upload.session_id).update(updated_at=timezone.now())
        upload.offset = new_offset
        if new_offset < upload.size and hasher is not None:
            _keep_hasher(upload, new_offset, hasher)
    if new_offset >= upload.size:
        _finish_file(upload, hasher)
    return upload


def _lock_at(fh, offset: int, committed: Callable[[], int]) -> int:
    """Lock the partial file once it holds exactly `offset` bytes; returns that length.

    A pipelining client sends chunk N+1 while chunk N is still being stored: N+1 waits for N (in whatever
    order the requests reach the lock), as long as the file keeps growing. A chunk for bytes already stored,
    or one whose predecessors stop arriving, is answered with the server's offset (409).
    """
    last, deadline = -1, 0.0
    while True:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            locked = True
        except BlockingIOError:
            locked = False
        stored = fh.seek(0, 2)
        if locked and stored == offset:
            return stored
        if locked:
            fcntl.flock(fh, fcntl.LOCK_UN)
            if offset < stored:
                raise OffsetConflict(
                    stored,
                    _("The chunk starts at %(got)d but the server has %(have)d bytes.")
                    % {"got": offset, "have": stored},
                )
        if stored != last:  # progress: give the chunks before this one time to land
            last, deadline = stored, time.monotonic() + CHUNK_WAIT
        elif time.monotonic() > deadline:  # a stalled writer's bytes do not count: report what is verified
            stored = committed()
            raise OffsetConflict(
                stored,
                _("The chunk starts at %(got)d but the server has %(have)d bytes.") % {"got": offset, "have": stored},
            )
        time.sleep(0.005)


def _committed_offset(upload: UploadFile) -> int:
    return UploadFile.objects.filter(pk=upload.pk).values_list("offset", flat=True).first() or 0


def _write_hashing(read: Callable[[int], bytes], out, count: int, hashers: list) -> int:
    """Write up to `count` bytes from `read` to `out` and feed them to `hashers`; returns how many came.

    Big chunks are hashed in a second thread while this one writes: SHA-256 and the write both release the
    GIL, so on two cores a chunk costs the longer of the two, not their sum (SHA-256 is ~2/3 of the work).
    """
    hashing = _HashThread(hashers) if hashers and count >= THREAD_MIN else None
    written = 0
    try:
        while written < count:
            block = read(min(READ_BLOCK, count - written))
            if not block:
                break
            if hashing is not None:
                hashing.feed(block)
            else:
                for h in hashers:
                    h.update(block)
            view = memoryview(block)
            while view:  # an unbuffered write may take less than it was given
                view = view[out.write(view) :]
            written += len(block)
    finally:
        if hashing is not None:
            hashing.close()
    return written


class _HashThread:
    """Hashes the blocks it is fed, in order, in a thread of its own (a bounded queue: flat memory)."""

    def __init__(self, hashers: list) -> None:
        self.hashers = hashers
        self.blocks: queue.Queue[bytes | None] = queue.Queue(maxsize=8)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="chunk-hash", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while (block := self.blocks.get()) is not None:
            if self.error is None:
                try:
                    for h in self.hashers:
                        h.update(block)
                except BaseException as exc:  # re-raised by close() in the request's thread
                    self.error = exc

    def feed(self, block: bytes) -> None:
        self.blocks.put(block)

    def close(self) -> None:
        """Wait until every block fed is hashed."""
        self.blocks.put(None)
        self.thread.join()
        if self.error is not None:
            raise self.error


def _finish_file(upload: UploadFile, hasher) -> None:
    part = partial_path(upload)
    actual = hasher.hexdigest() if hasher is not None else blobs.sha256_of(part)
    if upload.sha256 and actual != upload.sha256:
        part.write_bytes(b"")
        UploadFile.objects.filter(pk=upload.pk).update(offset=0)
        upload.offset = 0
        raise ValidationError(
            {
                "sha256": [
                    _(
                        "Checksum mismatch for “%(path)s”: expected %(want)s, received %(got)s. "
                        "The bytes were discarded; upload the file again."
                    )
                    % {"path": upload.path, "want": upload.sha256, "got": actual}
                ]
            }
        )
    if not upload.sha256:
        upload.sha256 = actual
    if upload.archive:
        UploadFile.objects.filter(pk=upload.pk).update(sha256=upload.sha256)
        return  # expanded at commit
    blob, _created = blobs.put(part, actual, upload.size, move=True)
    upload.blob = blob
    UploadFile.objects.filter(pk=upload.pk).update(sha256=upload.sha256, blob=blob)


# --- Commit ------------------------------------------------------------------------------------


class Committed(NamedTuple):
    version: DatasetVersion
    created: bool  # False: the upload held exactly the latest version's files, which is returned instead


def commit_upload(session: UploadSession, user, *, remove: list[str] | None = None) -> Committed:
    """Turn a complete upload into the dataset's next version, atomically; archives are expanded here.

    Content identical to the dataset's latest version (same paths, bytes and sizes: the same digest) makes no new
    version, as `git commit` and `dvc commit` make nothing of an unchanged tree: the session is closed on the latest
    version and `created` is False, so a script that uploads after every run neither fails nor piles up copies."""
    from apps.datasets import services

    _require_open(session)
    files = list(session.files.all())
    # An empty file needs no chunk: finish it here.
    for upload in files:
        if upload.size == 0 and upload.blob_id is None and not upload.archive:
            _finish_file(upload, hashlib.sha256())
    incomplete = [f"{u.path} ({u.offset}/{u.size} bytes)" for u in files if u.offset < u.size]
    if incomplete:
        raise ValidationError(
            {"files": [_("These files are not complete yet: %(files)s.") % {"files": ", ".join(incomplete)}]}
        )

    manifest: dict[str, tuple[str, int]] = {}
    if session.base is not None:
        manifest = {f.path: (f.blob_id, f.size) for f in session.base.files.all()}
    for raw in remove or []:
        path = clean_path(raw, field="remove")
        if path not in manifest:
            raise ValidationError({"remove": [_("“%(path)s” is not in the base version.") % {"path": path}]})
        del manifest[path]
    for upload in files:
        if not upload.archive:
            manifest[upload.path] = (upload.blob_id, upload.size)
    for upload in files:
        if upload.archive:
            prefix = "" if upload.path == "." else upload.path
            try:
                entries = archives.expand(partial_path(upload), prefix, session)
            except ValidationError:
                remove_file(upload)
                raise
            manifest.update(entries)
    if not manifest:
        raise ValidationError({"files": [_("A version needs at least one file.")]})
    new = services.new_bytes(session.project, {sha for sha, _size in manifest.values()})
    check_quota(session.project, new, exclude_session=session)

    with transaction.atomic():
        locked = UploadSession.objects.select_for_update().get(pk=session.pk)
        _require_open(locked)
        # Under the dataset's lock (create_version takes the same one), so two identical commits make one version.
        Dataset.objects.select_for_update().filter(pk=session.dataset_id).first()
        latest = session.dataset.versions.order_by("-number").first()
        created = latest is None or latest.digest != services.manifest_digest(manifest)
        if created:
            version = services.create_version(
                session.dataset, manifest, user=user, message=session.message, parent=session.base,
                task_run=session.task_run,
            )  # fmt: skip
        else:
            version = latest
        UploadSession.objects.filter(pk=session.pk).update(
            status=UploadStatus.COMMITTED, version=version, updated_at=timezone.now()
        )
        folder = session_dir(session)
        transaction.on_commit(lambda: shutil.rmtree(folder, ignore_errors=True))
    session.status, session.version = UploadStatus.COMMITTED, version
    return Committed(version, created)


def abort_upload(session: UploadSession) -> None:
    """Drop the session and its staged bytes; blobs only it used are purged by the next cleanup."""
    UploadSession.objects.filter(pk=session.pk, status=UploadStatus.OPEN).update(
        status=UploadStatus.ABORTED, updated_at=timezone.now()
    )
    shutil.rmtree(session_dir(session), ignore_errors=True)
    session.status = UploadStatus.ABORTED


def cleanup_stale_uploads(max_age: timedelta | None = None) -> int:
    """Abort open sessions idle for longer than `max_age` (default DATASETS_UPLOAD_EXPIRY_HOURS, 24 h)."""
    if max_age is None:
        max_age = timedelta(hours=int(getattr(settings, "DATASETS_UPLOAD_EXPIRY_HOURS", 24)))
    cutoff = timezone.now() - max_age
    stale = list(UploadSession.objects.filter(status=UploadStatus.OPEN, updated_at__lt=cutoff))
    for session in stale:
        abort_upload(session)
    # Folders of sessions that no longer exist (deleted rows, crashed commits).
    root = staging_dir()
    if root.is_dir():
        known = {str(pk) for pk in UploadSession.objects.filter(status=UploadStatus.OPEN).values_list("pk", flat=True)}
        for child in root.iterdir():
            if child.name not in known and child.stat().st_mtime < cutoff.timestamp():
                shutil.rmtree(child, ignore_errors=True)
    return len(stale)
