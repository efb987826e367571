"""`Client(url, token)`: one attribute per kind of object the portal keeps, each a small resource over /api/v1/."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from portal_client._http import Http
from portal_client.catalog import Apps, Installations, KnowledgeBases, LabelingProjects, Studies
from portal_client.datasets import Datasets
from portal_client.errors import NotFound, PortalError, RunFailed, WaitTimeout
from portal_client.logs import Logs
from portal_client.models import (
    Experiment,
    ModelAlias,
    ModelVersion,
    Notebook,
    Pipeline,
    Project,
    RegisteredModel,
    Revision,
    Run,
    Service,
    TaskRun,
    Template,
    Token,
    TrackingRun,
)


class Resource:
    def __init__(self, http: Http) -> None:
        self.http = http


def split_ref(ref: str, project: str | None) -> tuple[str | None, str]:
    """ "project/name" → ("project", "name"); "name" → (project, "name")."""
    if "/" in ref:
        head, _slash, name = ref.partition("/")
        return head, name
    return project, ref


class Projects(Resource):
    def list(self, **filters: Any) -> Iterator[Project]:
        return (Project.from_api(item) for item in self.http.pages("projects/", filters))

    def get(self, slug: str) -> Project:
        return Project.from_api(self.http.get(f"projects/{slug}/"))

    def create(self, slug: str, name: str, description: str = "", **fields: Any) -> Project:
        body = {"slug": slug, "name": name, "description": description, **fields}
        return Project.from_api(self.http.post("projects/", body))

    def update(self, slug: str, **fields: Any) -> Project:
        return Project.from_api(self.http.patch(f"projects/{slug}/", fields))

    def delete(self, slug: str) -> None:
        self.http.delete(f"projects/{slug}/")


class Templates(Resource):
    def list(self, project: str | None = None, **filters: Any) -> Iterator[Template]:
        return (Template.from_api(item) for item in self.http.pages("templates/", {"project": project, **filters}))

    def get(self, template_id: int) -> Template:
        return Template.from_api(self.http.get(f"templates/{template_id}/"))

    def create(self, project: str, slug: str, name: str, command: list[str], **fields: Any) -> Template:
        body = {"project": project, "slug": slug, "name": name, "command": command, **fields}
        return Template.from_api(self.http.post("templates/", body))

    def apply(self, project: str, definition: dict[str, Any] | str | Path) -> Template:
        """Create the template a mapping (or its YAML) describes; the same slug again makes its next version."""
        if isinstance(definition, Path):
            definition = definition.read_text()
        if isinstance(definition, str):
            definition = yaml.safe_load(definition)
        if not isinstance(definition, dict):
            raise PortalError("A template is a mapping (slug, name, command, args_schema, …).")
        body = {key: value for key, value in definition.items() if key != "project"}
        return Template.from_api(self.http.post("templates/", {"project": project, **body}))

    def delete(self, template_id: int) -> None:
        self.http.delete(f"templates/{template_id}/")


class Pipelines(Resource):
    def list(self, project: str | None = None, **filters: Any) -> Iterator[Pipeline]:
        return (Pipeline.from_api(item) for item in self.http.pages("pipelines/", {"project": project, **filters}))

    def get(self, ref: int | str, project: str | None = None) -> Pipeline:
        """By id, or by name: "project/name" (or `name` with `project=`)."""
        if isinstance(ref, int) or str(ref).isdigit():
            return Pipeline.from_api(self.http.get(f"pipelines/{ref}/"))
        slug, name = split_ref(str(ref), project)
        found = self.http.get("pipelines/", {"project": slug, "name": name})["results"]
        if not found:
            where = f" in project “{slug}”" if slug else ""
            raise NotFound(404, {"detail": f"No pipeline “{name}”{where} that you can access."})
        if len(found) > 1:
            raise NotFound(404, {"detail": f"Several pipelines are called “{name}”: name the project (project/name)."})
        return Pipeline.from_api(found[0])

    def create(self, project: str, name: str, spec: dict[str, Any], description: str = "") -> Pipeline:
        body = {"project": project, "name": name, "spec": spec, "description": description}
        return Pipeline.from_api(self.http.post("pipelines/", body))

    def update(self, ref: int | str, **fields: Any) -> Pipeline:
        pipeline = self.get(ref)
        return Pipeline.from_api(self.http.patch(f"pipelines/{pipeline.id}/", fields))

    def apply(self, project: str, source: str | dict[str, Any] | Path) -> Pipeline:
        """Create the pipeline the YAML (`apiVersion: portal/v1`) describes, or update the one of that name."""
        if isinstance(source, Path):
            source = source.read_text()
        if isinstance(source, dict):
            source = yaml.safe_dump(source, sort_keys=False)
        return Pipeline.from_api(self.http.post("pipelines/import/", {"project": project, "yaml": source}))

    def apply_code(self, project: str, pipe: Any, **params: Any) -> Pipeline:
        """Register a `@dsl.pipeline`'s components as the project's templates (a new version only where one
        changed), then apply the pipeline compiled with `params`."""
        from portal_client import dsl

        templates = Templates(self.http)
        for comp in pipe.components():
            wanted = comp.template()
            current = max(templates.list(project, slug=comp.slug), key=lambda t: t.version, default=None)
            same = (
                current is not None
                and current.project == project
                and all(current.raw.get(key) == wanted[key] for key in ("command", "image", "resources", "name"))
            )
            if not same:
                templates.create(project, **wanted)
        return self.apply(project, dsl.compile(pipe, **params))

    def export(self, ref: int | str) -> str:
        """The pipeline as YAML (what `apply` takes)."""
        pipeline = self.get(ref)
        return self.http.request("GET", f"pipelines/{pipeline.id}/export/").text

    def delete(self, ref: int | str) -> None:
        self.http.delete(f"pipelines/{self.get(ref).id}/")

    def run(self, ref: int | str, *, idempotency_key: str | None = None, ignore_cache: bool = False) -> Run:
        """Start a run. With the same `idempotency_key`, a retried call returns the same run. With `ignore_cache`,
        every node runs, even one whose inputs match an earlier successful task."""
        pipeline = self.get(ref)
        headers = {"Idempotency-Key": idempotency_key or uuid.uuid4().hex}
        body = {"ignore_cache": True} if ignore_cache else None
        return Run.from_api(self.http.post(f"pipelines/{pipeline.id}/run/", body, headers=headers))


class Runs(Resource):
    poll_interval = 1.0

    def __init__(self, http: Http, logs: Logs) -> None:
        super().__init__(http)
        self.logs = logs

    def list(self, project: str | None = None, **filters: Any) -> Iterator[Run]:
        params = {"project": project, "ordering": "-created_at", **filters}
        return (Run.from_api(item) for item in self.http.pages("runs/", params))

    def get(self, run_id: int) -> Run:
        return Run.from_api(self.http.get(f"runs/{run_id}/"))

    def submit(self, pipeline: int | str, project: str | None = None, *, idempotency_key: str | None = None) -> Run:
        return Pipelines(self.http).run(
            pipeline if project is None else f"{project}/{pipeline}", idempotency_key=idempotency_key
        )

    def tasks(self, run_id: int) -> list[TaskRun]:
        self.get(run_id)  # a run you cannot see is not found (the list's filter would call the id invalid)
        return [TaskRun.from_api(item) for item in self.http.pages("task-runs/", {"run": run_id})]

    def wait(
        self,
        run_id: int,
        timeout: float | None = None,
        *,
        raise_on_failure: bool = False,
        on_change: Callable[[Run], None] | None = None,
    ) -> Run:
        """Poll until the run finishes; `raise_on_failure` turns a failed or cancelled run into RunFailed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        last = None
        while True:
            run = self.get(run_id)
            if on_change is not None and run.status != last:
                on_change(run)
            last = run.status
            if run.is_finished:
                if raise_on_failure and not run.succeeded:
                    raise RunFailed(run)
                return run
            if deadline is not None and time.monotonic() > deadline:
                raise WaitTimeout(f"run {run_id} still {run.status} after {timeout:g} s")
            time.sleep(self.poll_interval)

    def cancel(self, run_id: int) -> Run:
        return Run.from_api(self.http.post(f"runs/{run_id}/cancel/"))

    def retry(self, run_id: int, *, idempotency_key: str | None = None) -> Run:
        """A new run that reuses what succeeded and runs the rest again."""
        headers = {"Idempotency-Key": idempotency_key or uuid.uuid4().hex}
        return Run.from_api(self.http.post(f"runs/{run_id}/retry/", None, headers=headers))

    def rerun(self, run_id: int, node: str, *, idempotency_key: str | None = None) -> Run:
        """A new run from `node`: it and everything downstream run again."""
        headers = {"Idempotency-Key": idempotency_key or uuid.uuid4().hex}
        return Run.from_api(self.http.post(f"runs/{run_id}/rerun/", {"node": node}, headers=headers))

    def delete(self, run_id: int) -> None:
        self.http.delete(f"runs/{run_id}/")


class Experiments(Resource):
    def list(self, project: str | None = None, **filters: Any) -> Iterator[Experiment]:
        return (Experiment.from_api(i) for i in self.http.pages("experiments/", {"project": project, **filters}))

    def get(self, experiment_id: int) -> Experiment:
        return Experiment.from_api(self.http.get(f"experiments/{experiment_id}/"))

    def create(self, project: str, name: str) -> Experiment:
        return Experiment.from_api(self.http.post("experiments/", {"project": project, "name": name}))

    def delete(self, experiment_id: int) -> None:
        """Marks it (and its runs) deleted, as MLflow does."""
        self.http.delete(f"experiments/{experiment_id}/")

    def runs(
        self, experiment_id: int | None = None, project: str | None = None, **filters: Any
    ) -> Iterator[TrackingRun]:
        if experiment_id is not None:
            self.get(experiment_id)  # one you cannot see is not found (the list's filter would call the id invalid)
        params = {"experiment": experiment_id, "project": project, **filters}
        return (TrackingRun.from_api(item) for item in self.http.pages("tracking-runs/", params))

    def run(self, run_uuid: str) -> TrackingRun:
        return TrackingRun.from_api(self.http.get(f"tracking-runs/{run_uuid}/"))


class Models(Resource):
    """The model registry: registered models, their versions and aliases."""

    def list(self, project: str | None = None, **filters: Any) -> Iterator[RegisteredModel]:
        params = {"project": project, **filters}
        return (RegisteredModel.from_api(item) for item in self.http.pages("registered-models/", params))

    def get(self, ref: int | str, project: str | None = None) -> RegisteredModel:
        if isinstance(ref, int) or str(ref).isdigit():
            return RegisteredModel.from_api(self.http.get(f"registered-models/{ref}/"))
        slug, name = split_ref(str(ref), project)
        found = self.http.get("registered-models/", {"project": slug, "name": name})["results"]
        if len(found) != 1:
            raise NotFound(404, {"detail": f"No single registered model “{name}” that you can access."})
        return RegisteredModel.from_api(found[0])

    def create(self, project: str, name: str, description: str = "") -> RegisteredModel:
        body = {"project": project, "name": name, "description": description}
        return RegisteredModel.from_api(self.http.post("registered-models/", body))

    def delete(self, ref: int | str) -> None:
        self.http.delete(f"registered-models/{self.get(ref).id}/")

    def versions(self, ref: int | str) -> list[ModelVersion]:
        model = self.get(ref)
        items = self.http.pages("model-versions/", {"registered_model": model.id})
        return [ModelVersion.from_api(item) for item in items]

    def aliases(self, ref: int | str) -> list[ModelAlias]:
        model = self.get(ref)
        return [ModelAlias.from_api(item) for item in self.http.pages("model-aliases/", {"registered_model": model.id})]

    def set_alias(self, ref: int | str, alias: str, version: int) -> ModelAlias:
        """Point `alias` at version number `version` (moving it if it pointed elsewhere)."""
        model = self.get(ref)
        target = next((v for v in self.versions(model.id) if v.version == version), None)
        if target is None:
            raise NotFound(404, {"detail": f"Model “{model.name}” has no version {version}."})
        existing = [a for a in self.aliases(model.id) if a.alias == alias]
        if existing:
            data = self.http.patch(f"model-aliases/{existing[0].id}/", {"model_version": target.id})
        else:
            body = {"registered_model": model.id, "alias": alias, "model_version": target.id}
            data = self.http.post("model-aliases/", body)
        return ModelAlias.from_api(data)

    def delete_alias(self, ref: int | str, alias: str) -> None:
        for item in self.aliases(ref):
            if item.alias == alias:
                self.http.delete(f"model-aliases/{item.id}/")
                return
        raise NotFound(404, {"detail": f"No alias “{alias}”."})


class Services(Resource):
    def list(self, project: str | None = None, **filters: Any) -> Iterator[Service]:
        return (Service.from_api(item) for item in self.http.pages("services/", {"project": project, **filters}))

    def get(self, ref: int | str, project: str | None = None) -> Service:
        if isinstance(ref, int) or str(ref).isdigit():
            return Service.from_api(self.http.get(f"services/{ref}/"))
        slug, name = split_ref(str(ref), project)
        found = [s for s in self.http.pages("services/", {"project": slug}) if s["name"] == name]
        if len(found) != 1:
            raise NotFound(404, {"detail": f"No single service “{name}” that you can access."})
        return Service.from_api(found[0])

    def create(self, project: str, name: str, registered_model: str, **fields: Any) -> Service:
        body = {"project": project, "name": name, "registered_model": registered_model, **fields}
        return Service.from_api(self.http.post("services/", body))

    def update(self, ref: int | str, **fields: Any) -> Service:
        return Service.from_api(self.http.patch(f"services/{self.get(ref).id}/", fields))

    def delete(self, ref: int | str) -> None:
        self.http.delete(f"services/{self.get(ref).id}/")

    def _act(self, ref: int | str, action: str, body: dict[str, Any] | None = None) -> Any:
        return self.http.post(f"services/{self.get(ref).id}/{action}/", body)

    def deploy(self, ref: int | str) -> Any:
        """Roll out a new revision of what the settings say (the revision, or a note when it waits for an alias)."""
        return self._act(ref, "deploy")

    def canary(self, ref: int | str, percent: int, model_version: int | None = None) -> Any:
        return self._act(ref, "canary", {"percent": percent, "model_version": model_version})

    def promote(self, ref: int | str) -> Any:
        """The ready canary becomes the current revision."""
        return self._act(ref, "promote")

    def rollback(self, ref: int | str, revision: int) -> Any:
        return self._act(ref, "rollback", {"revision": revision})

    def stop(self, ref: int | str) -> Any:
        return self._act(ref, "stop")

    def start(self, ref: int | str) -> Any:
        return self._act(ref, "start")

    def revisions(self, ref: int | str) -> list[Revision]:
        service = self.get(ref)
        return [Revision.from_api(item) for item in self.http.pages("revisions/", {"service": service.id})]

    def wait_ready(self, ref: int | str, timeout: float = 120) -> Service:
        deadline = time.monotonic() + timeout
        while True:
            service = self.get(ref)
            if service.status == "ready":
                return service
            if service.status == "failed":
                raise RunFailed(_ServiceState(service))
            if time.monotonic() > deadline:
                raise WaitTimeout(f"service {service.name} still {service.status} after {timeout:g} s")
            time.sleep(1)

    def predict(self, ref: int | str, body: dict[str, Any], model: str | None = None) -> Any:
        """An Open Inference Protocol v2 request (`{"inputs": [...]}`) to the service, with this client's token."""
        service = self.get(ref)
        base = service.url if service.url.endswith("/") else service.url + "/"
        return self.http.json("POST", f"{base}v2/models/{model or service.name}/infer", json=body)


class _ServiceState:
    """A failed service in RunFailed's terms."""

    def __init__(self, service: Service) -> None:
        self.id, self.number, self.pipeline_name = service.id, 0, f"service {service.name}"
        self.status, self.reason = service.status, service.reason


class Notebooks(Resource):
    def list(self, project: str | None = None, **filters: Any) -> Iterator[Notebook]:
        return (Notebook.from_api(item) for item in self.http.pages("notebooks/", {"project": project, **filters}))

    def get(self, notebook_id: int) -> Notebook:
        return Notebook.from_api(self.http.get(f"notebooks/{notebook_id}/"))

    def create(self, project: str, name: str, **fields: Any) -> Notebook:
        return Notebook.from_api(self.http.post("notebooks/", {"project": project, "name": name, **fields}))

    def start(self, notebook_id: int) -> Notebook:
        return Notebook.from_api(self.http.post(f"notebooks/{notebook_id}/start/"))

    def stop(self, notebook_id: int) -> Notebook:
        return Notebook.from_api(self.http.post(f"notebooks/{notebook_id}/stop/"))

    def restart(self, notebook_id: int) -> Notebook:
        return Notebook.from_api(self.http.post(f"notebooks/{notebook_id}/restart/"))

    def delete(self, notebook_id: int) -> None:
        self.http.delete(f"notebooks/{notebook_id}/")


class Tokens(Resource):
    def list(self) -> Iterator[Token]:
        return (Token.from_api(item) for item in self.http.pages("tokens/"))

    def create(self, name: str, project: str | None = None, scope: str = "write", days: int | None = None) -> Token:
        """A new token; its secret is in `.token`, shown once."""
        body = {"name": name, "project": project, "scope": scope, "days": days}
        return Token.from_api(self.http.post("tokens/", body))

    def revoke(self, token_id: int) -> None:
        self.http.delete(f"tokens/{token_id}/")


class Client:
    """The portal at `url`, as the owner of `token` (an API token: Settings → API tokens, or `portal login`)."""

    def __init__(self, url: str, token: str | None = None, *, timeout: float = 60.0) -> None:
        self.http = Http(url, token, timeout=timeout)
        self.url = self.http.url
        self.projects = Projects(self.http)
        self.datasets = Datasets(self.http)
        self.templates = Templates(self.http)
        self.pipelines = Pipelines(self.http)
        self.logs = Logs(self.http)
        self.runs = Runs(self.http, self.logs)
        self.experiments = Experiments(self.http)
        self.models = Models(self.http)
        self.services = Services(self.http)
        self.notebooks = Notebooks(self.http)
        self.tokens = Tokens(self.http)
        self.studies = Studies(self.http)
        self.knowledge = KnowledgeBases(self.http)
        self.apps = Apps(self.http)
        self.installations = Installations(self.http)
        self.labeling = LabelingProjects(self.http)

    @classmethod
    def from_config(cls, server: str | None = None) -> Client:
        """The server and token `portal login` stored (or PORTAL_URL and PORTAL_TOKEN)."""
        from portal_client.config import resolve

        url, token = resolve(server)
        return cls(url, token)

    def whoami(self) -> dict[str, Any]:
        return self.http.get("me/")

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
