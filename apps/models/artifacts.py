"""Artifacts in the `artifacts` storage, under `<experiment id>/<run id>/artifacts/…` (and
`<experiment id>/models/<model id>/artifacts/…` for logged models): the path after `mlflow-artifacts:/`.

Everything streams: uploads are copied chunk by chunk from the request, downloads are file responses.

Each stored file is recorded with its size (`ArtifactFile`): artifacts count against the project's storage quota
with its dataset files (apps/projects/storage.py). An upload over the quota is refused before a byte is written when
its length is declared, else as soon as it streams past the room left; either way no file is left at its path.
"""

from __future__ import annotations

import posixpath
import shutil
from collections.abc import Iterator
from typing import IO

from django.core.files.base import File
from django.core.files.storage import Storage, storages
from django.db import transaction
from django.db.models import Q, Sum

from apps.models.errors import InvalidParameter, NotFound, QuotaExceeded
from apps.models.models import ArtifactFile, Experiment
from apps.projects.models import Quota
from apps.projects.storage import over_quota_message, storage_limit, used_bytes

CHUNK = 1024 * 1024
MAX_PATH = 1024  # ArtifactFile.path
USAGE = "artifacts"  # this app's name in the storage registry (apps/projects/storage.py)


def usage(project: object) -> int:
    """Bytes of the project's stored artifacts (registered in apps/models/apps.py)."""
    return ArtifactFile.objects.filter(project=project).aggregate(total=Sum("size"))["total"] or 0


def storage() -> Storage:
    return storages["artifacts"]


def clean_path(path: str | None, *, allow_empty: bool = True) -> str:
    """A relative POSIX path with no `..`, no absolute or drive prefix and no empty or `.` segments."""
    path = path or ""
    bad = (
        path.startswith(("/", "\\"))
        or "\\" in path
        or "\x00" in path
        or (len(path) > 1 and path[1] == ":")
        or "://" in path
    )
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if bad or ".." in parts:
        raise InvalidParameter(f"Invalid path: {path!r}. Paths must be relative and must not contain '..'.")
    if not parts and not allow_empty:
        raise InvalidParameter("An artifact path is required.")
    return "/".join(parts)


def experiment_id_of(path: str) -> int:
    """The experiment whose files `path` (relative to the artifact root) names; every path starts with it."""
    head = path.split("/", 1)[0]
    if not head.isdigit():
        raise InvalidParameter(f"Invalid path: {path!r}. Artifact paths start with an experiment id.")
    return int(head)


class _OverQuota(Exception):
    pass


class _RequestFile(File):
    """A request body as a Django File that is read once, in chunks (no seek, no size), stopped past `room`."""

    def __init__(self, stream: IO[bytes], room: int | None = None) -> None:
        super().__init__(stream, name="upload")
        self.room, self.read_bytes = room, 0

    def chunks(self, chunk_size: int | None = None) -> Iterator[bytes]:
        while True:
            data = self.file.read(chunk_size or CHUNK)
            if not data:
                return
            self.read_bytes += len(data)
            if self.room is not None and self.read_bytes > self.room:
                raise _OverQuota
            yield data

    @property
    def size(self) -> int | None:  # type: ignore[override]
        return None


def save(path: str, stream: IO[bytes], declared: int | None = None) -> None:
    """Store the request stream at `path`, replacing a file already there, and record its size. QuotaExceeded when
    it does not fit in the project's storage quota (`declared`: its Content-Length, when the client sent one)."""
    if len(path) > MAX_PATH:
        raise InvalidParameter(f"Artifact paths are at most {MAX_PATH} characters.")
    owner = Experiment.objects.filter(pk=experiment_id_of(path)).values_list("project_id", "project__slug").first()
    if owner is None:
        raise NotFound(f"No such artifact path: '{path}'")
    project_id, slug = owner
    limit = storage_limit(project_id)
    replaced = ArtifactFile.objects.filter(path=path).values_list("size", flat=True).first() or 0
    room = None
    if limit is not None:
        used = used_bytes(project_id) - replaced
        room = limit - used
        if declared is not None and declared > room:
            raise QuotaExceeded(over_quota_message(slug, declared, used, limit))
    store = storage()
    if store.exists(path):
        store.delete(path)
    ArtifactFile.objects.filter(path=path).delete()
    upload = _RequestFile(stream, room)
    try:
        saved = store.save(path, upload)
    except _OverQuota:
        _discard(store, path)  # what was written before it went over
        raise QuotaExceeded(over_quota_message(slug, None, limit - room, limit)) from None
    if saved != path:  # another upload won the race for the name: keep the newest under the requested name
        store.delete(path)
        with store.open(saved, "rb") as source:
            store.save(path, File(source))
        store.delete(saved)
    with transaction.atomic():
        # Concurrent uploads of the project are recorded one at a time, each checked against what the others took.
        Quota.objects.select_for_update().filter(project_id=project_id).exists()
        if limit is not None and used_bytes(project_id) + upload.read_bytes > limit:
            _discard(store, path)
            raise QuotaExceeded(over_quota_message(slug, upload.read_bytes, used_bytes(project_id), limit))
        ArtifactFile.objects.update_or_create(path=path, defaults={"project_id": project_id, "size": upload.read_bytes})


def _discard(store: Storage, path: str) -> None:
    try:
        if store.exists(path):
            store.delete(path)
    except OSError:
        pass


def open_file(path: str) -> IO[bytes] | None:
    store = storage()
    try:
        if not path or not store.exists(path):
            return None
        return store.open(path, "rb")
    except (IsADirectoryError, FileNotFoundError, NotADirectoryError):
        return None


def is_dir(path: str) -> bool:
    store = storage()
    try:
        store.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    return True


def list_dir(path: str) -> list[dict]:
    """Entries directly under `path` as MLflow lists them: basenames, `is_dir`, `file_size` for files."""
    store = storage()
    try:
        dirs, files = store.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        return []
    entries = [{"path": d, "is_dir": True} for d in dirs]
    for name in files:
        entries.append({"path": name, "is_dir": False, "file_size": store.size(posixpath.join(path, name))})
    return sorted(entries, key=lambda e: e["path"])


def delete(path: str) -> None:
    """Delete a file or a whole directory (and their records: what they counted against the quota is free)."""
    ArtifactFile.objects.filter(Q(path=path) | Q(path__startswith=path.rstrip("/") + "/")).delete()
    store = storage()
    if hasattr(store, "path"):  # local filesystem: remove directories too
        local = store.path(path)
        if is_dir(path):
            shutil.rmtree(local, ignore_errors=True)
            return
    if store.exists(path):
        store.delete(path)
        return
    for name in _walk(path):
        store.delete(name)


def _walk(path: str) -> Iterator[str]:
    store = storage()
    try:
        dirs, files = store.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        return
    for name in files:
        yield posixpath.join(path, name)
    for name in dirs:
        yield from _walk(posixpath.join(path, name))
