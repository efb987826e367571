"""The page of one tracked run: info and lineage, params, tags, metric charts, the artifact browser."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import mimetypes
import posixpath

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _

from apps.models import artifacts, register, registry
from apps.models.errors import TrackingError
from apps.models.models import LoggedModel, Run
from apps.models.views.common import artifact_base, decorate_run, format_number, ms_to_datetime
from apps.models.views.experiments import series_url
from apps.projects.access import project_view
from apps.projects.models import Project
from apps.projects.permissions import CONTRIBUTE, VIEW, has_project_perm

PREVIEW_BYTES = 64 * 1024
CSV_ROWS = 20
TEXT_EXTENSIONS = {".txt", ".log", ".md", ".py", ".yaml", ".yml", ".json", ".cfg", ".ini", ".toml", ".html", ".xml"}
TEXT_NAMES = {"MLmodel", "requirements.txt", "conda.yaml", "python_env.yaml", "Dockerfile", "LICENSE"}
IMAGE_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
}  # fmt: skip  (no SVG inline: it can carry script)


def _root(run: Run, model_id: str) -> tuple[str, LoggedModel | None]:
    """The storage folder being browsed: the run's artifacts, or a model the run logged (MLflow 3)."""
    if model_id:
        logged = LoggedModel.objects.filter(source_run=run, model_id=model_id).first()
        if logged is None:
            raise Http404(_("This run logged no such model."))
        return artifact_base(logged.artifact_location), logged
    return artifact_base(run.artifact_uri), None


def _path(request: HttpRequest) -> str:
    try:
        return artifacts.clean_path(request.GET.get("path", ""))
    except TrackingError as error:
        raise Http404(error.message) from None


def _run_context(request: HttpRequest, project: Project, run: Run) -> dict:
    decorate_run(run)
    params = list(run.params.order_by("key"))
    tags = list(run.tags.order_by("key"))
    metrics = list(run.latest_metrics.order_by("key"))
    for metric in metrics:
        metric.display = format_number(metric.number)  # type: ignore[attr-defined]
        metric.when = ms_to_datetime(metric.timestamp)  # type: ignore[attr-defined]
    charts = [
        {"key": m.key, "series_json": json.dumps([{"label": m.key, "url": series_url(run, m.key)}])} for m in metrics
    ]
    can_register = has_project_perm(request.user, project, CONTRIBUTE)
    return {
        "project": project,
        "run": run,
        "experiment": run.experiment,
        "params": params,
        "user_tags": [t for t in tags if not t.key.startswith("mlflow.")],
        "system_tags": [t for t in tags if t.key.startswith("mlflow.")],
        "metrics": metrics,
        "charts": charts,
        "inputs": list(run.inputs.order_by("name")),
        "versions": list(run.model_versions.select_related("registered_model").order_by("registered_model__name")),
        "logged_models": list(LoggedModel.objects.filter(source_run=run).order_by("-creation_timestamp")),
        "source_task": run.source_task,
        "source_pipeline_run": run.source_pipeline_run,
        "tab": "experiments",
        "can_register": can_register,
        "model_sources": register.model_sources(run) if can_register else [],
        "model_names": registry.model_names(project) if can_register else [],
    }


@project_view(VIEW, model=Run, methods=("GET",))
def run_detail(request: HttpRequest, project: Project, run: Run) -> HttpResponse:
    return render(request, "models/run_detail.html", _run_context(request, project, run))


@project_view(CONTRIBUTE, model=Run, methods=("POST",))
def run_register(request: HttpRequest, project: Project, run: Run) -> HttpResponse:
    """Register a model from the run: a new version of a registered model (made when the name is new)."""
    try:
        version = register.register_from_run(
            run, request.user, name=request.POST.get("name", ""), source=request.POST.get("source", "")
        )
    except ValidationError as exc:
        context = _run_context(request, project, run)
        context.update(register_errors=exc.message_dict, register_data=request.POST)
        return render(request, "models/run_detail.html", context, status=400)
    messages.success(
        request,
        _("Registered %(model)s v%(version)s.") % {"model": version.registered_model.name, "version": version.version},
    )
    return redirect("models:version-detail", project=project.slug, pk=version.pk)


def _preview(base: str, path: str, size: int | None) -> dict:
    """What the browser shows for one file: text (pretty JSON), an image, the first CSV rows, or why not."""
    name = posixpath.basename(path)
    ext = posixpath.splitext(name)[1].lower()
    if ext in IMAGE_TYPES:
        return {"kind": "image"}
    if ext == ".svg":
        return {"kind": "none", "message": _("SVG files are not shown inline; download the file.")}
    if ext not in TEXT_EXTENSIONS | {".csv", ".tsv"} and name not in TEXT_NAMES:
        return {"kind": "none", "message": _("No preview for this kind of file; download it.")}
    handle = artifacts.open_file(posixpath.join(base, path))
    if handle is None:
        raise Http404(_("No such artifact."))
    with handle:
        data = handle.read(PREVIEW_BYTES + 1)
    truncated = len(data) > PREVIEW_BYTES
    text = data[:PREVIEW_BYTES].decode("utf-8", errors="replace")
    if "\x00" in text:
        return {"kind": "none", "message": _("This file is binary; download it.")}
    if ext in (".csv", ".tsv"):
        lines = text.splitlines()
        if truncated and lines:
            lines = lines[:-1]  # a partial last line
        reader = csv.reader(io.StringIO("\n".join(lines)), delimiter="\t" if ext == ".tsv" else ",")
        rows = [row for _i, row in zip(range(CSV_ROWS + 1), reader, strict=False)]
        if rows:
            return {
                "kind": "table",
                "header": rows[0],
                "rows": rows[1:],
                "more": truncated or len(lines) > CSV_ROWS + 1,
            }
    if ext == ".json" and not truncated:
        # A document nested past the decoder's (or encoder's) recursion limit is shown as it is, not a 500.
        with contextlib.suppress(ValueError, RecursionError):
            text = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    return {"kind": "text", "text": text, "truncated": truncated}


@project_view(VIEW, model=Run, methods=("GET",))
def run_artifacts(request: HttpRequest, project: Project, run: Run) -> HttpResponse:
    """The artifact browser: `?path=` a folder (its entries) or a file (its preview); `?model=` a logged model."""
    return _browser(request, project, run)


def _browser(request: HttpRequest, project: Project, run: Run) -> HttpResponse:
    model_id = request.GET.get("model", "")
    base, logged = _root(run, model_id)
    path = _path(request)
    full = posixpath.join(base, path) if path else base
    entry, preview, entries = None, None, []
    if path and not artifacts.is_dir(full):
        handle = artifacts.open_file(full)
        if handle is None:
            raise Http404(_("No such artifact."))
        handle.close()
        entry = {"path": path, "name": posixpath.basename(path), "size": artifacts.storage().size(full)}
        preview = _preview(base, path, entry["size"])
        parent = posixpath.dirname(path)
    else:
        parent = posixpath.dirname(path) if path else None
        for item in artifacts.list_dir(full):
            entries.append({**item, "full": posixpath.join(path, item["path"]) if path else item["path"]})
    crumbs = []
    if path:
        parts = path.split("/")
        crumbs = [{"name": p, "path": "/".join(parts[: i + 1])} for i, p in enumerate(parts)]
    context = {
        "project": project,
        "run": run,
        "logged": logged,
        "model_id": model_id,
        "path": path,
        "parent": parent,
        "crumbs": crumbs,
        "entries": entries,
        "entry": entry,
        "preview": preview,
    }
    template = "models/partials/artifacts.html" if request.htmx else "models/run_artifacts.html"
    return render(request, template, context)


@project_view(VIEW, model=Run, methods=("GET",))
def run_artifact_download(request: HttpRequest, project: Project, run: Run) -> HttpResponse:
    """One artifact file, streamed; images may be shown inline (`?inline=1`), everything else is an attachment."""
    base, _logged = _root(run, request.GET.get("model", ""))
    path = _path(request)
    if not path:  # nothing named: the browser, to choose a file
        return _browser(request, project, run)
    handle = artifacts.open_file(posixpath.join(base, path))
    if handle is None:
        raise Http404(_("No such artifact."))
    ext = posixpath.splitext(path)[1].lower()
    inline = request.GET.get("inline") == "1" and ext in IMAGE_TYPES
    content_type = IMAGE_TYPES.get(ext) if inline else (mimetypes.guess_type(path)[0] or "application/octet-stream")
    if content_type in ("text/html", "image/svg+xml", "application/xhtml+xml"):
        content_type = "application/octet-stream"  # never rendered by the browser from our origin
    response = FileResponse(
        handle, as_attachment=not inline, filename=posixpath.basename(path), content_type=content_type
    )
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "default-src 'none'; img-src 'self'; sandbox"
    return response
