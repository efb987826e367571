"""Artifacts in the `artifacts` storage, under `<experiment id>/<run id>/artifacts/…` (and
`<experiment id>/models/<model id>/artifacts/…` for logged models): the path after `mlflow-artifacts:/`.

Everything streams: uploads are copied chunk by chunk from the request, downloads are file responses.
"""

from __future__ import annotations

import posixpath
import shutil
from collections.abc import Iterator
from typing import IO

from django.core.files.base import File
from django.core.files.storage import Storage, storages

from apps.models.errors import InvalidParameter

CHUNK = 1024 * 1024


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


class _RequestFile(File):
    """A request body as a Django File that is read once, in chunks (no seek, no size)."""

    def __init__(self, stream: IO[bytes]) -> None:
        super().__init__(stream, name="upload")

    def chunks(self, chunk_size: int | None = None) -> Iterator[bytes]:
        while True:
            data = self.file.read(chunk_size or CHUNK)
            if not data:
                return
            yield data

    @property
    def size(self) -> int | None:  # type: ignore[override]
        return None


def save(path: str, stream: IO[bytes]) -> None:
    """Store the request stream at `path`, replacing a file already there."""
    store = storage()
    if store.exists(path):
        store.delete(path)
    saved = store.save(path, _RequestFile(stream))
    if saved != path:  # another upload won the race for the name: keep the newest under the requested name
        store.delete(path)
        with store.open(saved, "rb") as source:
            store.save(path, File(source))
        store.delete(saved)


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
    """Delete a file or a whole directory."""
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
