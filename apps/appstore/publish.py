"""Publishing: a project admin turns one of the project's pipelines into an app version of the project's own app.

The bundle carries what installing it elsewhere needs: the project's own templates the pipeline's nodes use (built-in
ones are everywhere), and a copy of every dataset version a node reads (its files, from the blob store), which the
pipeline then names as `{{ install }}-<dataset>`. Who sees the app: the project only, projects it is shared with,
or everyone once staff approve it. Each publish is a new immutable version; installed ones never change."""

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
TEMPLATE_FIELDS = ("name", "category", "description", "image", "command", "workdir", "env", "args_schema",
                   "resources", "kind", "framework", "replicas", "timeout")  # fmt: skip


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
    manifest = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": name,
            "version": version,
            "title": title,
            "summary": summary,
            "category": "pipeline",
            "tags": ["published", project.slug],
        },
        "spec": {
            "datasets": list(datasets.values()),
            "templates": list(templates.values()),
            "pipelines": [{"name": "{{ install }}", "description": pipeline.description, **spec}],
        },
    }
    manifest["spec"] = {key: value for key, value in manifest["spec"].items() if value}
    readme = f"# {title}\n\n{summary}\n\nPublished from the pipeline **{pipeline.name}** of {project.name}.\n"
    return bundles.from_entries({bundles.MANIFEST: _yaml(manifest), bundles.README: readme.encode(), **files})


def _template_fields(template: JobTemplate) -> dict[str, Any]:
    return {field: getattr(template, field) for field in TEMPLATE_FIELDS}


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


@transaction.atomic
def publish_pipeline(
    pipeline: Pipeline,
    user: Any,
    *,
    name: str,
    version: str,
    title: str,
    summary: str = "",
    visibility: str = App.Visibility.PROJECT,
    share_with: list[Project] | None = None,
) -> AppVersion:
    """A new version of the project's app `name` made from `pipeline`; needs `change_project` (a project admin).
    `share_with`: the projects that see it when `visibility` is "shared"; "public" waits for staff approval."""
    project = pipeline.project
    if not has_project_perm(user, project, CHANGE):
        raise PermissionDenied(_("Only a project admin may publish the project's pipelines as apps."))
    errors: dict[str, list[str]] = {}
    if not NAME_RE.match(name or ""):
        errors["name"] = [_("Lower-case letters, digits and hyphens, at most 50 characters.")]
    if visibility not in App.Visibility.values:
        errors["visibility"] = [_("Choose one of %(v)s.") % {"v": ", ".join(App.Visibility.values)}]
    if errors:
        raise ValidationError(errors)
    made = add_version(pipeline_bundle(pipeline, name=name, version=version, title=title, summary=summary),
                       project=project, visibility=visibility)  # fmt: skip
    app = made.app
    if app.visibility != visibility:
        app.visibility = visibility
        app.approved = False  # a change of audience is approved again
        app.save(update_fields=["visibility", "approved"])
    app.shared_with.set([p for p in share_with or [] if p.pk != project.pk] if visibility == "shared" else [])
    return made
