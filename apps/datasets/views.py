"""Pages of datasets: list, detail (versions + lineage), upload, version (files, preview, stats), diff."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db.models import Count, Max
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _

from apps.datasets import downloads, services
from apps.datasets.analysis import kind_of
from apps.datasets.filters import DatasetFilterSet
from apps.datasets.forms import DatasetForm
from apps.datasets.models import Dataset, DatasetVersion
from apps.datasets.previews import NoPreview, preview_for
from apps.datasets.quota import pending_bytes, stored_bytes
from apps.projects.access import project_view
from apps.projects.models import Project
from apps.projects.permissions import CONTRIBUTE, VIEW, has_project_perm
from portal.lib.errors import Conflict
from portal.lib.forms import add_service_errors
from portal.lib.listing import listing, paged


@project_view(VIEW, methods=("GET",))
def dataset_list(request: HttpRequest, project: Project) -> HttpResponse:
    datasets = (
        Dataset.objects.filter(project=project)
        .annotate(latest=Max("versions__number"), count=Count("versions"))
        .order_by("name", "pk")
    )
    rows = listing(request, DatasetFilterSet, datasets)
    context = {
        "project": project,
        "listing": rows,
        "used": stored_bytes(project),
        "pending": pending_bytes(project),
        "can_edit": has_project_perm(request.user, project, CONTRIBUTE),
    }
    return render(request, "datasets/dataset_list.html", context, status=rows.status)


@project_view(CONTRIBUTE)
def dataset_create(request: HttpRequest, project: Project) -> HttpResponse:
    form = DatasetForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            data = {k: form.cleaned_data[k] for k in ("description", "tags", "licence", "source")}
            dataset = services.create_dataset(project, request.user, name=form.cleaned_data["name"], **data)
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(
                request, _("Dataset “%(name)s” created; upload its first version.") % {"name": dataset.name}
            )
            return redirect("datasets:dataset-upload", project=project.slug, pk=dataset.pk)
    return render(
        request, "datasets/dataset_form.html", {"project": project, "form": form}, status=400 if form.errors else 200
    )


@project_view(VIEW, model=Dataset, methods=("GET",))
def dataset_detail(request: HttpRequest, project: Project, dataset: Dataset) -> HttpResponse:
    # One page of versions, newest first: a dataset committed thousands of times costs what one with 25 does.
    versions = paged(
        request, dataset.versions.select_related("created_by", "parent", "pipeline_run").order_by("-number")
    )
    context = {
        "project": project,
        "dataset": dataset,
        "versions": versions.page.object_list,
        "versions_page": versions,
        "lineage": services.lineage(dataset),
        "can_edit": has_project_perm(request.user, project, CONTRIBUTE),
    }
    return render(request, "datasets/dataset_detail.html", context)


@project_view(CONTRIBUTE, model=Dataset, methods=("GET",))
def dataset_upload(request: HttpRequest, project: Project, dataset: Dataset) -> HttpResponse:
    """The chunked, resumable uploader (vanilla JS against the uploads API)."""
    latest = services.latest_version(dataset)
    return render(request, "datasets/upload.html", {"project": project, "dataset": dataset, "latest": latest})


@project_view(CONTRIBUTE, model=Dataset, methods=("POST",))
def dataset_delete(request: HttpRequest, project: Project, dataset: Dataset) -> HttpResponse:
    try:
        purged = services.delete_dataset(dataset, force=bool(request.POST.get("force")))
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect("datasets:dataset-detail", project=project.slug, pk=dataset.pk)
    except Conflict as exc:  # a retrain policy or a data monitor still names it
        messages.error(request, exc.message)
        return redirect("datasets:dataset-detail", project=project.slug, pk=dataset.pk)
    messages.success(
        request, _("Dataset deleted; %(n)d stored files no other version used were purged.") % {"n": len(purged)}
    )
    return redirect("datasets:dataset-list", project=project.slug)


@project_view(VIEW, model=DatasetVersion, methods=("GET",))
def version_detail(request: HttpRequest, project: Project, version: DatasetVersion) -> HttpResponse:
    files = list(version.files.all()[:1000])
    gallery = [f for f in files if kind_of(f.path) == "image"][:60]
    stats = sorted((version.statistics or {}).items())
    context = {
        "project": project,
        "dataset": version.dataset,
        "version": version,
        "files": files,
        "more_files": version.file_count > len(files),
        "gallery": gallery,
        "stats": stats,
        "others": version.dataset.versions.exclude(pk=version.pk).order_by("-number"),
        "usages": version.usages.select_related("pipeline_run", "task_run"),
        "can_edit": has_project_perm(request.user, project, CONTRIBUTE),
    }
    return render(request, "datasets/version_detail.html", context)


@project_view(VIEW, model=DatasetVersion, methods=("GET",))
def version_preview(request: HttpRequest, project: Project, version: DatasetVersion) -> HttpResponse:
    """The preview of `?path=` (an htmx partial on the version page, a page of its own otherwise)."""
    path = request.GET.get("path", "")
    entry = version.files.filter(path=path).first() if path else None
    preview, message = None, ""
    if entry is None:
        message = (
            _("Choose a file to preview.") if not path else _("No file “%(path)s” in this version.") % {"path": path}
        )
    else:
        try:
            preview = preview_for(version, entry)
        except NoPreview as exc:
            message = str(exc)
    context = {"project": project, "version": version, "entry": entry, "preview": preview, "message": message}
    template = "datasets/partials/preview.html" if request.htmx else "datasets/preview.html"
    return render(request, template, context)


@project_view(VIEW, model=DatasetVersion, methods=("GET",))
def version_diff(request: HttpRequest, project: Project, version: DatasetVersion) -> HttpResponse:
    others = version.dataset.versions.exclude(pk=version.pk).order_by("-number")
    other_id = request.GET.get("other", "")
    other = others.filter(pk=int(other_id)).first() if other_id.isdigit() else version.parent
    diff = services.diff_versions(other, version) if other is not None else None
    context = {
        "project": project,
        "dataset": version.dataset,
        "version": version,
        "other": other,
        "others": others,
        "diff": diff,
    }
    return render(request, "datasets/diff.html", context)


@project_view(VIEW, model=DatasetVersion, methods=("GET",))
def version_download(request: HttpRequest, project: Project, version: DatasetVersion) -> HttpResponse:
    """`?path=` one file; `?thumb=` an image thumbnail; neither: the whole version as a streamed zip."""
    if request.GET.get("thumb"):
        return downloads.thumbnail_response(request, version, request.GET["thumb"])
    if request.GET.get("path"):
        return downloads.file_response(request, version, request.GET["path"])
    return downloads.zip_response(request, version)


@project_view(CONTRIBUTE, model=DatasetVersion, methods=("POST",))
def version_delete(request: HttpRequest, project: Project, version: DatasetVersion) -> HttpResponse:
    dataset = version.dataset
    try:
        purged = services.delete_version(version, force=bool(request.POST.get("force")))
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect("datasets:version-detail", project=project.slug, pk=version.pk)
    messages.success(
        request, _("Version deleted; %(n)d stored files no other version used were purged.") % {"n": len(purged)}
    )
    return redirect("datasets:dataset-detail", project=project.slug, pk=dataset.pk)
