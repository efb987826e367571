"""Datasets and their versions: resumable upload (the portal's tus-style sessions) and verified download."""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from portal_client._http import Http
from portal_client.errors import Conflict, NotFound, TransportError, UploadError
from portal_client.models import Dataset, DatasetVersion, VersionFile

CHUNK = 8 * 1024 * 1024
RETRIES = 5

Progress = Callable[[str, int, int], None]  # (path, bytes done, size)


@dataclass(frozen=True)
class LocalFile:
    path: str  # relative, with "/"
    file: Path
    size: int
    sha256: str


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1024 * 1024), b""):
            digest.update(block)
    return digest.hexdigest()


def local_files(source: Path) -> list[LocalFile]:
    """The files under `source` (or `source` itself), sorted, with their size and SHA-256."""
    source = Path(source)
    if source.is_file():
        return [LocalFile(source.name, source, source.stat().st_size, sha256_of(source))]
    if not source.is_dir():
        raise FileNotFoundError(f"{source}: no such file or folder")
    found = []
    for file in sorted(p for p in source.rglob("*") if p.is_file()):
        found.append(LocalFile(file.relative_to(source).as_posix(), file, file.stat().st_size, sha256_of(file)))
    return found


def parse_ref(ref: str) -> tuple[str | None, str, str]:
    """ "[project/]name[@version]" → (project, name, version or "latest")."""
    project, _slash, rest = ref.rpartition("/")
    name, _at, which = rest.partition("@")
    return project or None, name, which or "latest"


class Datasets:
    def __init__(self, http: Http) -> None:
        self.http = http

    # --- datasets ---

    def list(self, project: str | None = None, **filters: Any) -> Iterator[Dataset]:
        return (Dataset.from_api(item) for item in self.http.pages("datasets/", {"project": project, **filters}))

    def get(self, ref: int | str, project: str | None = None) -> Dataset:
        """By id, or by name ("project/name", or `name` with `project=`)."""
        if isinstance(ref, int) or str(ref).isdigit():
            return Dataset.from_api(self.http.get(f"datasets/{ref}/"))
        slug, name, _which = parse_ref(str(ref))
        slug = slug or project
        found = self.http.get("datasets/", {"project": slug, "name": name})["results"]
        if len(found) != 1:
            where = f" in project “{slug}”" if slug else ""
            message = (
                f"No dataset “{name}”{where} that you can access."
                if not found
                else (f"Several datasets are called “{name}”: name the project (project/name).")
            )
            raise NotFound(404, {"detail": message})
        return Dataset.from_api(found[0])

    def create(self, project: str, name: str, description: str = "", **fields: Any) -> Dataset:
        body = {"project": project, "name": name, "description": description, **fields}
        return Dataset.from_api(self.http.post("datasets/", body))

    def delete(self, ref: int | str, project: str | None = None, *, force: bool = False) -> None:
        dataset = self.get(ref, project)
        self.http.delete(f"datasets/{dataset.id}/", {"force": "true" if force else None})

    # --- versions ---

    def versions(self, ref: int | str, project: str | None = None) -> list[DatasetVersion]:
        dataset = self.get(ref, project)
        items = self.http.pages("dataset-versions/", {"dataset": dataset.id, "ordering": "number"})
        return [DatasetVersion.from_api(item) for item in items]

    def version(self, ref: str, project: str | None = None) -> DatasetVersion:
        """ "[project/]name@version" (a number or "latest")."""
        slug, name, which = parse_ref(ref)
        dataset = self.get(name, slug or project)
        if which == "latest":
            if dataset.latest_version is None:
                raise NotFound(404, {"detail": f"Dataset “{name}” has no version yet."})
            which = str(dataset.latest_version)  # its number
        if not which.isdigit():
            raise NotFound(404, {"detail": f"“{which}” is no version: give a number or “latest”."})
        found = self.http.get("dataset-versions/", {"dataset": dataset.id, "number": which})["results"]
        if not found:
            raise NotFound(404, {"detail": f"Dataset “{name}” has no version {which}."})
        return DatasetVersion.from_api(found[0])

    def files(self, version_id: int) -> list[VersionFile]:
        return [VersionFile.from_api(item) for item in self.http.pages(f"dataset-versions/{version_id}/files/")]

    # --- upload ---

    def upload(
        self,
        source: str | Path,
        dataset: str,
        project: str | None = None,
        *,
        message: str = "",
        create: bool = True,
        progress: Progress | None = None,
    ) -> DatasetVersion:
        """Upload a folder (or one file) as a new version of `dataset`, creating the dataset when missing.

        Resumable: an interrupted upload leaves its session open on the server, and running the same upload again
        picks that session up and sends each file from the offset the server reports, so only missing bytes travel.
        Every chunk carries its SHA-256 (the server refuses one that arrived damaged) and every file its SHA-256."""
        slug, name, _which = parse_ref(dataset)
        slug = slug or project
        files = local_files(Path(source))
        try:
            target = self.get(name, slug)
        except NotFound:
            if not create or not slug:
                raise
            target = self.create(slug, name)
        session = self._open_session(target, files) or self.http.post(
            "dataset-uploads/", {"project": target.project, "dataset": target.id, "message": message}
        )
        announced = {f["path"]: f for f in session.get("files", [])}
        for local in files:
            entry = announced.get(local.path)
            if entry is None:
                body = {"path": local.path, "size": local.size, "sha256": local.sha256}
                entry = self.http.post(f"dataset-uploads/{session['id']}/files/", body)
            self._send(entry, local, progress)
        data = self.http.post(f"dataset-uploads/{session['id']}/commit/", {"remove": []})
        return DatasetVersion.from_api(data)

    def _open_session(self, dataset: Dataset, files: list[LocalFile]) -> dict[str, Any] | None:
        """An open session of this dataset whose announced files are among these (same size and checksum)."""
        wanted = {(f.path, f.size, f.sha256) for f in files}
        for session in self.http.pages("dataset-uploads/", {"dataset": dataset.id, "status": "open"}):
            announced = {(f["path"], f["size"], f["sha256"]) for f in session.get("files", [])}
            if announced and announced <= wanted:
                return session
        return None

    def _send(self, entry: dict[str, Any], local: LocalFile, progress: Progress | None) -> None:
        url = entry["upload_url"]
        offset = entry.get("offset", 0)
        failures = 0
        with local.file.open("rb") as handle:
            while offset < local.size or (local.size == 0 and not entry.get("complete")):
                handle.seek(offset)
                chunk = handle.read(CHUNK)
                checksum = base64.b64encode(hashlib.sha256(chunk).digest()).decode()
                headers = {
                    "Content-Type": "application/offset+octet-stream",
                    "Upload-Offset": str(offset),
                    "Upload-Checksum": f"sha256 {checksum}",
                    "Tus-Resumable": "1.0.0",
                }
                try:
                    response = self.http.request("PATCH", url, content=chunk, headers=headers)
                except (TransportError, Conflict):
                    failures += 1
                    if failures > RETRIES:
                        raise
                    offset = self._offset(url)  # where the server is: resume from there
                    continue
                offset = int(response.headers.get("Upload-Offset", offset + len(chunk)))
                entry = response.json()
                if progress is not None:
                    progress(local.path, offset, local.size)
                if local.size == 0:
                    break
        if offset != local.size:
            raise UploadError(f"{local.path}: the server holds {offset} of {local.size} bytes")

    def _offset(self, url: str) -> int:
        response = self.http.request("HEAD", url)
        return int(response.headers["Upload-Offset"])

    # --- download ---

    def download(
        self, ref: str, target: str | Path, project: str | None = None, *, progress: Progress | None = None
    ) -> DatasetVersion:
        """Write version `ref` ("[project/]name@version") under `target`, file by file, each checked against its
        SHA-256. A pull that stopped continues: files already there with the right checksum are kept, and a file cut
        short (its `.part`) is asked for from where it stopped (`Range: bytes=N-`)."""
        version = self.version(ref, project)
        root = Path(target)
        for entry in self.files(version.id):
            destination = root / entry.path
            if not destination.resolve().is_relative_to(root.resolve()):
                raise UploadError(f"{entry.path}: a path outside {root}")
            if (
                destination.is_file()
                and destination.stat().st_size == entry.size
                and sha256_of(destination) == (entry.sha256)
            ):
                continue
            destination.parent.mkdir(parents=True, exist_ok=True)
            partial = destination.with_name(destination.name + ".part")
            digest = hashlib.sha256()
            done = partial.stat().st_size if partial.is_file() else 0
            if not 0 < done < entry.size:
                done = 0
            headers = {"Range": f"bytes={done}-"} if done else {}
            url = f"dataset-versions/{version.id}/download/"
            with self.http.stream("GET", url, params={"path": entry.path}, headers=headers) as response:
                if done and response.status_code == 206:
                    with partial.open("rb") as kept:  # the bytes already here count towards the checksum
                        while block := kept.read(CHUNK):
                            digest.update(block)
                else:
                    done = 0  # the whole file came: start the part again
                with partial.open("ab" if done else "wb") as handle:
                    self._receive(response, handle, digest, done, entry, progress)
            if digest.hexdigest() != entry.sha256:
                partial.unlink()
                raise UploadError(f"{entry.path}: the bytes received do not match the version's SHA-256")
            os.replace(partial, destination)
        return version

    @staticmethod
    def _receive(
        response: Any, handle: Any, digest: Any, done: int, entry: VersionFile, progress: Progress | None
    ) -> None:
        for block in response.iter_bytes():
            handle.write(block)
            digest.update(block)
            done += len(block)
            if progress is not None:
                progress(entry.path, done, entry.size)
