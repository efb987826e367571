"""Publishing: a project admin turns one of the project's pipelines, inference services or notebooks into an app
version of the project's own app.

The bundle carries what installing it elsewhere needs. A pipeline: the project's own templates its nodes use
(built-in ones are everywhere), and a copy of every dataset version a node reads (its files, from the blob store),
which the pipeline then names as `{{ install }}-<dataset>`. A service: the files of the model version it serves,
which install as the first version of `{{ install }}-model` with the alias `staging` that the service follows, and
its settings (framework, resources, replicas). A notebook: its settings and the starter files the admin picks from
its owner's folder. Who sees the app: the project only, projects it is shared with, or everyone once staff approve
it. Each publish is a new immutable version; installed ones never change."""

from __future__ import annotations

import copy
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils.translation import gettext as _

from apps.appstore import bundle as bundles
from apps.appstore.manifest import API_VERSION, KIND, NAME_RE
from apps.appstore.models import App, AppVersion
from apps.appstore.services import add_version
from apps.datasets.blobs import open_chunks
from apps.datasets.services import DatasetRefError, resolve_dataset_arg
from apps.jobs.models import JobTemplate, Pipeline
from apps.jobs.references import dataset_arg_names
from apps.jobs.services import resolve_template
from apps.projects.models import Project
from apps.projects.permissions import CHANGE, has_project_perm

MAX_DATASET_BYTES = 10 * 1024 * 1024
MAX_MODEL_BYTES = 15 * 1024 * 1024  # a bundle is at most 20 MB (bundle.MAX_BUNDLE_BYTES)
MAX_NOTEBOOK_BYTES = 10 * 1024 * 1024
TEMPLATE_FIELDS = ("name", "category", "description", "image", "command", "workdir", "env", "args_schema",
                   "resources", "kind", "framework", "replicas", "strategy", "timeout")  # fmt: skip


def pipeline_bundle(pipeline: Pipeline, *, name: str, version: str, title: str, summary: str = "") -> bundles.Bundle:
    """The bundle that recreates `pipeline` (its own templates and the dataset versions it reads) in a project."""
    project = pipeline.project
    spec = copy.deepcopy(pipeline.spec)
    templates: dict[str, dict[str, Any]] = {}
    datasets: dict[str, dict[str, Any]] = {}
    files: dict[str, bytes] = {}
    for index, node in enumerate(spec.get("nodes", [])):
        template = resolve_template(project, node.get("template", ""))
        if template is None:
            raise ValidationError({f"nodes[{index}].template": [_("The template does not exist any more.")]})
        if template.project_id is not None:
            node["template"] = template.slug
            templates[template.slug] = {"slug": template.slug, **_template_fields(template)}
        for arg in dataset_arg_names(template):
            ref = (node.get("args") or {}).get(arg)
            if not ref:
                continue
            try:
                dataset_version = resolve_dataset_arg(project, str(ref))
            except DatasetRefError as exc:
                raise ValidationError({f"nodes[{index}].args.{arg}": [str(exc)]}) from None
            dataset = dataset_version.dataset
            node["args"][arg] = f"{{{{ install }}}}-{dataset.name}"
            if dataset.name not in datasets:
                datasets[dataset.name] = _dataset_entry(dataset_version, files)
    app_spec = {
        "datasets": list(datasets.values()),
        "templates": list(templates.values()),
        "pipelines": [{"name": "{{ install }}", "description": pipeline.description, **spec}],
    }
    manifest = _manifest(name, version, title, summary, "pipeline", ["published", project.slug], app_spec)
    readme = f"# {title}\n\n{summary}\n\nPublished from the pipeline **{pipeline.name}** of {project.name}.\n"
    return bundles.from_entries({bundles.MANIFEST: _yaml(manifest), bundles.README: readme.encode(), **files})


def _template_fields(template: JobTemplate) -> dict[str, Any]:
    fields = {field: getattr(template, field) for field in TEMPLATE_FIELDS}
    if not fields["strategy"]:  # only distributed templates with a strategy carry one (docs/distributed.md)
        del fields["strategy"]
    return fields


def _dataset_entry(version: Any, files: dict[str, bytes]) -> dict[str, Any]:
    dataset = version.dataset
    if version.total_size > MAX_DATASET_BYTES:
        raise ValidationError(
            {
                "datasets": [
                    _("Dataset “%(name)s” is too large to publish with the app (over 10 MB).") % {"name": dataset.name}
                ]
            }
        )
    paths = []
    for entry in version.files.all():
        path = f"datasets/{dataset.name}/{entry.path}"
        files[path] = b"".join(open_chunks(entry.blob_id))
        paths.append(path)
    return {"name": f"{{{{ install }}}}-{dataset.name}", "description": dataset.description,
            "files": paths, "strip": f"datasets/{dataset.name}/"}  # fmt: skip


def _yaml(data: dict[str, Any]) -> bytes:
    import yaml

    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True).encode()


def _manifest(name: str, version: str, title: str, summary: str, category: str, tags: list[str],
              spec: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": name,
            "version": version,
            "title": title,
            "summary": summary,
            "category": category,
            "tags": tags,
        },
        "spec": {key: value for key, value in spec.items() if value},
    }


def service_bundle(service: Any, *, name: str, version: str, title: str, summary: str = "") -> bundles.Bundle:
    """The bundle that recreates `service` in a project: the model version it serves now (its files) as the first
    version of `{{ install }}-model`, aliased `staging`, and a service following that alias with the same settings."""
    from apps.models.errors import TrackingError
    from apps.models.registry import version_by_alias
    from apps.serving.models import Framework
    from apps.serving.replicas import storage_path

    if service.framework in (Framework.CUSTOM, Framework.LLM) or service.registered_model_id is None:
        raise ValidationError({"service": [_("Only a service of a registered model can be published.")]})
    served = service.model_version
    if served is None:
        try:
            served = version_by_alias(service.registered_model, service.follow_alias)
        except TrackingError:  # the alias points nowhere yet
            served = None
    if served is None:
        raise ValidationError({"service": [_("The service serves no model version yet: nothing to publish.")]})
    files = _artifact_files(storage_path(served.source), "model/")
    settings = {"framework": service.framework, "cpu": str(service.cpu), "memory": f"{service.memory_bytes // 2**20}Mi",
                "min_replicas": service.min_replicas, "max_replicas": service.max_replicas,
                "scale_target": service.scale_target, "description": service.description}  # fmt: skip
    model = service.registered_model
    spec = {
        "models": [
            {
                "name": "{{ install }}-model",
                "description": model.description or f"{model.name} v{served.version}",
                "files": sorted(files),
                "strip": "model/",
                "alias": "staging",
            }
        ],
        "services": [{"name": "{{ install }}", "model": "{{ install }}-model", "alias": "staging", **settings}],
        "ready": {"service": "{{ install }}"},
    }
    manifest = _manifest(name, version, title, summary, "serving", ["published", service.project.slug], spec)
    readme = (
        f"# {title}\n\n{summary}\n\nPublished from the inference service **{service.name}** of "
        f"{service.project.name}: version {served.version} of the model **{model.name}**, served with "
        f"{service.get_framework_display()}.\n"
    )
    return bundles.from_entries({bundles.MANIFEST: _yaml(manifest), bundles.README: readme.encode(), **files})


def _artifact_files(rel: str, prefix: str) -> dict[str, bytes]:
    """The files of an artifact (a folder or one file) as bundle entries under `prefix`."""
    from apps.models import artifacts

    out: dict[str, bytes] = {}

    def read(path: str, name: str) -> None:
        handle = artifacts.open_file(path)
        if handle is None:
            raise ValidationError({"service": [_("The model's file “%(path)s” is missing.") % {"path": name}]})
        with handle:
            out[prefix + name] = handle.read(MAX_MODEL_BYTES + 1)

    def walk(path: str, under: str) -> None:
        for entry in artifacts.list_dir(path):
            if entry["is_dir"]:
                walk(f"{path}/{entry['path']}", f"{under}{entry['path']}/")
            else:
                read(f"{path}/{entry['path']}", under + entry["path"])
            if sum(len(v) for v in out.values()) > MAX_MODEL_BYTES:
                raise ValidationError({"service": [_("The model is too large to publish with the app (over 15 MB).")]})

    if artifacts.is_dir(rel):
        walk(rel, "")
    else:
        read(rel, rel.rsplit("/", 1)[-1])
    if not out:
        raise ValidationError({"service": [_("The model version has no files.")]})
    if sum(len(v) for v in out.values()) > MAX_MODEL_BYTES:
        raise ValidationError({"service": [_("The model is too large to publish with the app (over 15 MB).")]})
    return out


def notebook_files(notebook: Any) -> list[str]:
    """The files of the notebook owner's folder that may go with it (not hidden, at most one folder deep)."""
    from apps.notebooks import workspace

    home = workspace.home_dir(notebook.project, notebook.owner)
    if not home.is_dir():
        return []
    found = []
    for path in sorted([*home.glob("*"), *home.glob("*/*")]):
        rel = path.relative_to(home)
        hidden = any(part.startswith(".") for part in rel.parts) or rel.parts[0] == workspace.SHARED_LINK
        if path.is_file() and not path.is_symlink() and not hidden:
            found.append(rel.as_posix())
    return found


def notebook_bundle(notebook: Any, paths: list[str], *, name: str, version: str, title: str,
                    summary: str = "") -> bundles.Bundle:  # fmt: skip
    """The bundle that recreates `notebook` (its IDE settings) with the chosen starter files of its owner's folder,
    copied into the installing user's folder under `<install>/`."""
    from apps.notebooks import workspace

    available = set(notebook_files(notebook))
    home = workspace.home_dir(notebook.project, notebook.owner)
    errors = [p for p in paths if p not in available]
    if errors:
        raise ValidationError({"files": [_("No file “%(path)s” in the notebook's folder.") % {"path": errors[0]}]})
    names = [p.rsplit("/", 1)[-1] for p in paths]
    if len(set(names)) != len(names):
        raise ValidationError({"files": [_("Two of the files have the same name: they would overwrite each other.")]})
    files = {f"notebooks/{n}": (home / p).read_bytes() for p, n in zip(paths, names, strict=True)}
    if sum(len(v) for v in files.values()) > MAX_NOTEBOOK_BYTES:
        raise ValidationError({"files": [_("The files are too large to publish with the app (over 10 MB).")]})
    entry = {"name": "{{ install }}", "cpu": str(notebook.cpu), "memory": f"{notebook.memory_bytes // 2**20}Mi",
             "files": sorted(files)}  # fmt: skip
    manifest = _manifest(name, version, title, summary, "notebook", ["published", notebook.project.slug],
                         {"notebooks": [entry]})  # fmt: skip
    readme = (
        f"# {title}\n\n{summary}\n\nPublished from the notebook **{notebook.name}** of {notebook.project.name}, "
        f"with {', '.join(names) or 'no files'}.\n"
    )
    return bundles.from_entries({bundles.MANIFEST: _yaml(manifest), bundles.README: readme.encode(), **files})


@transaction.atomic
def publish_service(service: Any, user: Any, **values: Any) -> AppVersion:
    """A new version of the project's app made from an inference service (the model version it serves now)."""
    return _publish(service.project, user, lambda **meta: service_bundle(service, **meta), **values)


@transaction.atomic
def publish_notebook(notebook: Any, user: Any, *, files: list[str], **values: Any) -> AppVersion:
    """A new version of the project's app made from a notebook and the chosen files of its owner's folder."""
    return _publish(notebook.project, user, lambda **meta: notebook_bundle(notebook, files, **meta), **values)


@transaction.atomic
def publish_pipeline(pipeline: Pipeline, user: Any, **values: Any) -> AppVersion:
    """A new version of the project's app `name` made from `pipeline`; needs `change_project` (a project admin).
    `share_with`: the projects that see it when `visibility` is "shared"; "public" waits for staff approval."""
    return _publish(pipeline.project, user, lambda **meta: pipeline_bundle(pipeline, **meta), **values)


def _publish(
    project: Project,
    user: Any,
    make_bundle: Any,
    *,
    name: str,
    version: str,
    title: str,
    summary: str = "",
    visibility: str = App.Visibility.PROJECT,
    share_with: list[Project] | None = None,
) -> AppVersion:
    """A new version of the project's app `name` from the bundle `make_bundle(name=, version=, title=, summary=)`
    makes; needs `change_project` (a project admin). `share_with`: the projects that see it when `visibility` is
    "shared"; "public" waits for staff approval."""
    if not has_project_perm(user, project, CHANGE):
        raise PermissionDenied(_("Only a project admin may publish the project's objects as apps."))
    errors: dict[str, list[str]] = {}
    if not NAME_RE.match(name or ""):
        errors["name"] = [_("Lower-case letters, digits and hyphens, at most 50 characters.")]
    if visibility not in App.Visibility.values:
        errors["visibility"] = [_("Choose one of %(v)s.") % {"v": ", ".join(App.Visibility.values)}]
    if errors:
        raise ValidationError(errors)
    made = add_version(make_bundle(name=name, version=version, title=title, summary=summary),
                       project=project, visibility=visibility)  # fmt: skip
    app = made.app
    if app.visibility != visibility:
        app.visibility = visibility
        app.approved = False  # a change of audience is approved again
        app.save(update_fields=["visibility", "approved"])
    app.shared_with.set([p for p in share_with or [] if p.pk != project.pk] if visibility == "shared" else [])
    return made
