"""Resources of the newer apps: hyperparameter studies, knowledge bases, the app store, labeling projects."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from portal_client._http import Http
from portal_client.errors import NotFound, PortalError, WaitTimeout
from portal_client.models import (
    App,
    AppVersion,
    Document,
    Installation,
    KnowledgeBase,
    LabelingProject,
    Study,
    Trial,
)


class _Resource:
    path = ""
    kind = ""

    def __init__(self, http: Http) -> None:
        self.http = http

    def _find(self, ref: int | str, project: str | None) -> dict[str, Any]:
        """By id, or by name: "project/name" (or `name` with `project=`)."""
        if isinstance(ref, int) or str(ref).isdigit():
            return self.http.get(f"{self.path}{ref}/")
        slug, name = str(ref).split("/", 1) if "/" in str(ref) else (project, str(ref))
        found = [item for item in self.http.pages(self.path, {"project": slug, "search": name}) if item["name"] == name]
        if len(found) != 1:
            where = f" in project “{slug}”" if slug else ""
            what = "No" if not found else "More than one"
            raise NotFound(404, {"detail": f"{what} {self.kind} “{name}”{where} that you can access."})
        return found[0]


class Studies(_Resource):
    """Hyperparameter studies: created from their YAML definition (docs/hpo.md), started at once."""

    path = "studies/"
    kind = "study"
    poll_interval = 1.0

    def list(self, project: str | None = None, **filters: Any) -> Iterator[Study]:
        return (Study.from_api(item) for item in self.http.pages(self.path, {"project": project, **filters}))

    def get(self, ref: int | str, project: str | None = None) -> Study:
        return Study.from_api(self._find(ref, project))

    def create(self, project: str, definition: dict[str, Any] | str | Path) -> Study:
        """Create (and start) a study from its definition: a dict, YAML text or a YAML file."""
        if isinstance(definition, Path):
            definition = definition.read_text()
        if isinstance(definition, str):
            definition = yaml.safe_load(definition)
        if not isinstance(definition, dict):
            raise PortalError("A study definition is a mapping (name, objectives, space, trial_template, …).")
        body = {key: value for key, value in definition.items() if key not in ("project", "apiVersion", "kind")}
        return Study.from_api(self.http.post(self.path, {"project": project, **body}))

    def trials(self, ref: int | str, project: str | None = None, **filters: Any) -> list[Trial]:
        study = self.get(ref, project)
        return [Trial.from_api(item) for item in self.http.pages(f"{self.path}{study.id}/trials/", filters)]

    def stop(self, ref: int | str, project: str | None = None) -> Study:
        study = self.get(ref, project)
        return Study.from_api(self.http.post(f"{self.path}{study.id}/stop/"))

    def register_best(
        self, ref: int | str, name: str, project: str | None = None, artifact_path: str = "model"
    ) -> dict[str, Any]:
        """Register the best trial's model as the next version of registered model `name` → name, version, source."""
        study = self.get(ref, project)
        body = {"name": name, "artifact_path": artifact_path}
        return self.http.post(f"{self.path}{study.id}/register-best/", body)

    def wait(self, ref: int | str, project: str | None = None, timeout: float | None = None) -> Study:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            study = self.get(ref, project)
            if study.is_finished:
                return study
            if deadline is not None and time.monotonic() > deadline:
                raise WaitTimeout(f"study {study.name} still {study.status} after {timeout:g} s")
            time.sleep(self.poll_interval)


@dataclass
class ChatEvent:
    """One server-sent event of a streamed chat answer: `passages`, `token`, `done` or `error`."""

    event: str
    data: Any = field(default=None)


class KnowledgeBases(_Resource):
    """Knowledge bases: documents in, passages (query) and cited answers (chat) out."""

    path = "knowledge-bases/"
    kind = "knowledge base"
    poll_interval = 0.5

    def list(self, project: str | None = None, **filters: Any) -> Iterator[KnowledgeBase]:
        return (KnowledgeBase.from_api(item) for item in self.http.pages(self.path, {"project": project, **filters}))

    def get(self, ref: int | str, project: str | None = None) -> KnowledgeBase:
        return KnowledgeBase.from_api(self._find(ref, project))

    def create(self, project: str, name: str, description: str = "", **fields: Any) -> KnowledgeBase:
        body = {"project": project, "name": name, "description": description, **fields}
        return KnowledgeBase.from_api(self.http.post(self.path, body))

    def delete(self, ref: int | str, project: str | None = None) -> None:
        self.http.delete(f"{self.path}{self.get(ref, project).id}/")

    def documents(self, ref: int | str, project: str | None = None) -> list[Document]:
        kb = self.get(ref, project)
        return [Document.from_api(item) for item in self.http.pages(f"{self.path}{kb.id}/documents/")]

    def upload(
        self,
        ref: int | str,
        file: str | Path,
        project: str | None = None,
        *,
        name: str | None = None,
        tags: list[str] | None = None,
    ) -> Document:
        """Add a file (Markdown, text, HTML, PDF, CSV); ingestion goes on in the background (`wait_ingested`)."""
        path = Path(file)
        kb = self.get(ref, project)
        data: dict[str, Any] = {"name": name or path.name, "tags": list(tags or [])}
        with path.open("rb") as handle:
            answer = self.http.json(
                "POST", f"{self.path}{kb.id}/upload/", data=data, files={"file": (path.name, handle)}
            )
        return Document.from_api(answer)

    def wait_ingested(self, ref: int | str, project: str | None = None, timeout: float = 120) -> list[Document]:
        """Poll until no document is queued or ingesting; the documents as they ended (`ready` or `failed`)."""
        deadline = time.monotonic() + timeout
        while True:
            docs = self.documents(ref, project)
            if all(doc.status not in ("pending", "queued", "ingesting") for doc in docs):
                return docs
            if time.monotonic() > deadline:
                raise WaitTimeout(f"documents still ingesting after {timeout:g} s")
            time.sleep(self.poll_interval)

    def query(self, ref: int | str, query: str, project: str | None = None, *, k: int = 5, mode: str = "hybrid",
              tags: list[str] | None = None) -> dict[str, Any]:  # fmt: skip
        """The best passages for `query` (with `not_found` when nothing relevant is there)."""
        kb = self.get(ref, project)
        body = {"query": query, "k": k, "mode": mode, "tags": tags}
        return self.http.post(f"{self.path}{kb.id}/query/", {key: v for key, v in body.items() if v is not None})

    def chat(self, ref: int | str, question: str, project: str | None = None) -> dict[str, Any]:
        """A whole answer citing the passages: answer, not_found, passages."""
        kb = self.get(ref, project)
        return self.http.post(f"{self.path}{kb.id}/chat/", {"question": question})

    def chat_stream(self, ref: int | str, question: str, project: str | None = None) -> Iterator[ChatEvent]:
        """The answer as it is written: a `passages` event, then `token`s, then `done` (or `error`)."""
        kb = self.get(ref, project)
        body = {"question": question, "stream": True}
        # Accept stays JSON: the API negotiates on it (an error is JSON), the answer itself is text/event-stream.
        with self.http.stream("POST", f"{self.path}{kb.id}/chat/", json=body) as response:
            name, lines = "message", []
            for line in response.iter_lines():
                if line.startswith("event:"):
                    name = line[6:].strip()
                elif line.startswith("data:"):
                    lines.append(line[5:].strip())
                elif not line and lines:
                    yield ChatEvent(name, json.loads("\n".join(lines)))
                    name, lines = "message", []
            if lines:
                yield ChatEvent(name, json.loads("\n".join(lines)))


class Apps(_Resource):
    """The app catalogue: search it, install apps into a project with parameters, move bundles around."""

    path = "apps/"
    kind = "app"

    def list(self, search: str | None = None, **filters: Any) -> Iterator[App]:
        return (App.from_api(item) for item in self.http.pages(self.path, {"q": search, **filters}))

    def get(self, ref: int | str) -> App:
        if isinstance(ref, int) or str(ref).isdigit():
            return App.from_api(self.http.get(f"{self.path}{ref}/"))
        found = [item for item in self.http.pages(self.path) if item["name"] == ref]
        if not found:
            raise NotFound(404, {"detail": f"No app “{ref}” in the catalogue."})
        return App.from_api(found[0])

    def versions(self, ref: int | str) -> list[AppVersion]:
        app = self.get(ref)
        return [AppVersion.from_api(item) for item in self.http.pages(f"{self.path}{app.id}/versions/")]

    def download(self, ref: int | str, target: str | Path, version: str | None = None) -> Path:
        """Save a version's bundle zip (default: the newest) to `target` (a file, or a folder to put it in)."""
        import hashlib

        app = self.get(ref)
        params = {"version": version} if version else None
        response = self.http.request("GET", f"{self.path}{app.id}/bundle/", params=params)
        data = response.content
        expected = response.headers.get("Digest", "").removeprefix("sha-256=")
        if expected and hashlib.sha256(data).hexdigest() != expected:
            raise PortalError(f"the bundle of {app.name} arrived damaged (digest mismatch)")
        target = Path(target)
        if target.is_dir():
            disposition = response.headers.get("Content-Disposition", "")
            filename = disposition.split("filename=")[-1].strip('"') or f"{app.name}.zip"
            target = target / filename
        target.write_bytes(data)
        return target

    def upload(self, project: str, bundle: str | Path, visibility: str = "project") -> AppVersion:
        """Add a bundle zip as a new version of the project's app (project admins)."""
        path = Path(bundle)
        with path.open("rb") as handle:
            answer = self.http.json(
                "POST",
                f"{self.path}upload/",
                data={"project": project, "visibility": visibility},
                files={"bundle": (path.name, handle, "application/zip")},
            )
        return AppVersion.from_api(answer)

    def install(
        self,
        project: str,
        app: str,
        name: str = "",
        parameters: dict[str, Any] | None = None,
        version: str | None = None,
    ) -> Installation:
        """Install `app` (all or nothing); errors name the parameter or manifest field at fault."""
        body: dict[str, Any] = {"project": project, "app": app, "name": name, "parameters": parameters or {}}
        if version:
            body["version"] = version
        return Installation.from_api(self.http.post("installations/", body))


class Installations(_Resource):
    path = "installations/"
    kind = "installation"

    def list(self, project: str | None = None, **filters: Any) -> Iterator[Installation]:
        return (Installation.from_api(item) for item in self.http.pages(self.path, {"project": project, **filters}))

    def get(self, ref: int | str, project: str | None = None) -> Installation:
        return Installation.from_api(self._find(ref, project))

    def uninstall(self, ref: int | str, project: str | None = None, *, delete_data: bool = False) -> None:
        """Remove what the installation created; datasets and trained models stay unless `delete_data`."""
        installation = self.get(ref, project)
        self.http.delete(f"{self.path}{installation.id}/", {"delete_data": "true" if delete_data else None})


class LabelingProjects(_Resource):
    """Labeling projects: a dataset version's items annotated in Label Studio, exported as a new version."""

    path = "labeling-projects/"
    kind = "labeling project"

    def list(self, project: str | None = None, **filters: Any) -> Iterator[LabelingProject]:
        return (LabelingProject.from_api(i) for i in self.http.pages(self.path, {"project": project, **filters}))

    def get(self, ref: int | str, project: str | None = None) -> LabelingProject:
        return LabelingProject.from_api(self._find(ref, project))

    def create(
        self,
        project: str,
        name: str,
        dataset_version: int,
        kind: str,
        labels: list[str] | None = None,
        **fields: Any,
    ) -> LabelingProject:
        """`kind` as the portal names it (e.g. image classification, boxes, text); `labels`, or `label_config`
        (Label Studio XML) for kind "xml"."""
        body = {"project": project, "name": name, "dataset_version": dataset_version, "kind": kind, **fields}
        if labels is not None:
            body["labels"] = labels
        return LabelingProject.from_api(self.http.post(self.path, body))

    def progress(self, ref: int | str, project: str | None = None) -> dict[str, Any]:
        """Status, task count and what the last sync read from Label Studio (labeled, skipped, per annotator)."""
        item = self.get(ref, project)
        return {"name": item.name, "status": item.status, "task_count": item.task_count,
                "synced_at": item.synced_at, **item.progress}  # fmt: skip

    def export(self, ref: int | str, project: str | None = None) -> dict[str, Any]:
        """The annotations as a new dataset version → version, ref, formats, annotated_tasks."""
        item = self.get(ref, project)
        return self.http.post(f"{self.path}{item.id}/export/")

    def delete(self, ref: int | str, project: str | None = None) -> None:
        self.http.delete(f"{self.path}{self.get(ref, project).id}/")
