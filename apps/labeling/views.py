"""Labeling pages: the project's labeling projects with their progress, a new-project form, a project's page
(progress, open in Label Studio, export). While Label Studio is down or starting, the pages say so and the rest of
the portal works on."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _

from apps.jobs.models import Pipeline
from apps.labeling import autolabel, export, server, services, training
from apps.labeling.client import LabelStudioError, LabelStudioUnavailable
from apps.labeling.forms import LabelingProjectForm
from apps.labeling.models import LabelingProject, MLBackend
from apps.projects.access import project_view
from apps.projects.models import Project
from apps.projects.permissions import CONTRIBUTE, VIEW, has_project_perm
from apps.serving.models import InferenceService
from portal.lib.forms import add_service_errors


@project_view(VIEW, methods=("GET",))
def labeling_list(request: HttpRequest, project: Project) -> HttpResponse:
    rows = LabelingProject.objects.filter(project=project).select_related("dataset_version__dataset")
    context = {
        "project": project,
        "rows": rows,
        "can_create": has_project_perm(request.user, project, CONTRIBUTE),
        "labelstudio": server.state(),
    }
    return render(request, "labeling/labeling_list.html", context)


@project_view(CONTRIBUTE)
def labeling_create(request: HttpRequest, project: Project) -> HttpResponse:
    form = LabelingProjectForm(request.POST or None, project=project)
    status = 200
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            row = services.create_labeling_project(project, request.user, **data)
        except ValidationError as exc:
            add_service_errors(form, exc)
        except (LabelStudioUnavailable, LabelStudioError) as exc:
            form.add_error(None, str(exc))
            status = 503
        else:
            messages.success(request, _("Labeling project “%(name)s” created.") % {"name": row.name})
            return redirect("labeling:labeling-detail", project=project.slug, pk=row.pk)
    if form.errors and status == 200:
        status = 400
    context = {"project": project, "form": form, "labelstudio": server.state()}
    return render(request, "labeling/labeling_form.html", context, status=status)


@project_view(VIEW, model=LabelingProject, methods=("GET",))
def labeling_detail(request: HttpRequest, project: Project, labeling: LabelingProject) -> HttpResponse:
    state = server.state()
    context = {
        "project": project,
        "labeling": labeling,
        "labelstudio": state,
        "can_annotate": has_project_perm(request.user, project, CONTRIBUTE),
        "exports": labeling.exports.select_related("version__dataset", "run"),
        "progress": labeling.progress,
        "ml_backend": MLBackend.objects.filter(labeling_project=labeling).select_related("service").first(),
        "services": InferenceService.objects.filter(project=project).order_by("name"),
        "uncertain": [t for t in autolabel.uncertain_first(labeling)[:20] if t.score is not None],
        "detail_url": request.path,
        "pipelines": Pipeline.objects.filter(project=project).order_by("name"),
        "labels_dataset": export.labels_dataset_name(labeling),
    }
    return render(request, "labeling/labeling_detail.html", context)


@project_view(CONTRIBUTE, model=LabelingProject, methods=("GET",))
def labeling_annotate(request: HttpRequest, project: Project, labeling: LabelingProject) -> HttpResponse:
    """Annotate in the portal: Label Studio's own front end, fed and saved through the portal's API (annotate.py);
    editors and above. A viewer gets 403 and keeps the project's page with its progress."""
    api = reverse("api:labelingproject-detail", args=[labeling.pk])
    context = {
        "project": project,
        "labeling": labeling,
        "labelstudio": server.state(),
        "progress": labeling.progress,
        "detail_url": reverse("labeling:labeling-detail", kwargs={"project": project.slug, "pk": labeling.pk}),
        "annotate_data": {
            "config": labeling.label_config,
            "next": api + "next-task/",
            "save": api + "annotations/",
            "user": {"pk": request.user.pk, "firstName": request.user.get_username(), "lastName": ""},
            "task": request.GET.get("task", ""),
        },
        "annotate_messages": {
            "loading": _("Loading the next task…"),
            "saving": _("Saving…"),
            "saved": _("Saved. Loading the next task…"),
            "skipped": _("Skipped. Loading the next task…"),
            "remaining": _("%(n)s tasks still to do"),
            "task": _("Task %(id)s: %(path)s"),
            "failed": _("Not saved: %(reason)s"),
            "no_editor": _("Label Studio's editor did not load."),
        },
    }
    return render(request, "labeling/labeling_annotate.html", context)


@project_view(CONTRIBUTE, model=LabelingProject, methods=("POST",))
def labeling_export(request: HttpRequest, project: Project, labeling: LabelingProject) -> HttpResponse:
    try:
        made = export.export_annotations(labeling, request.user)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    except (LabelStudioUnavailable, LabelStudioError) as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, _("Annotations exported as %(ref)s.") % {"ref": made.version.ref})
    return redirect("labeling:labeling-detail", project=project.slug, pk=labeling.pk)


@project_view(CONTRIBUTE, model=LabelingProject, methods=("POST",))
def labeling_attach(request: HttpRequest, project: Project, labeling: LabelingProject) -> HttpResponse:
    """Attach an inference service of this project as the auto-labeler (Label Studio's ML backend)."""
    raw = request.POST.get("service", "")
    service = InferenceService.objects.filter(project=project, pk=int(raw)).first() if raw.isdigit() else None
    if service is None:
        messages.error(request, _("Choose an inference service of this project."))
    else:
        try:
            autolabel.attach(labeling, service, request.user)
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
        except (LabelStudioUnavailable, LabelStudioError) as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, _("%(name)s now pre-annotates this project.") % {"name": service.name})
    return redirect("labeling:labeling-detail", project=project.slug, pk=labeling.pk)


@project_view(CONTRIBUTE, model=LabelingProject, methods=("POST",))
def labeling_preannotate(request: HttpRequest, project: Project, labeling: LabelingProject) -> HttpResponse:
    """Pre-annotate all: every task predicted by the attached service, imported into Label Studio in bulk."""
    row = MLBackend.objects.filter(labeling_project=labeling).select_related("service").first()
    if row is None:
        messages.error(request, _("Attach an inference service first."))
    else:
        try:
            count = autolabel.preannotate_all(row)
        except (autolabel.NotServing, LabelStudioUnavailable, LabelStudioError) as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, _("%(n)d predictions imported into Label Studio.") % {"n": count})
    return redirect("labeling:labeling-detail", project=project.slug, pk=labeling.pk)


@project_view(CONTRIBUTE, model=LabelingProject, methods=("POST",))
def labeling_training(request: HttpRequest, project: Project, labeling: LabelingProject) -> HttpResponse:
    """Choose the training pipeline (empty: none)."""
    raw = request.POST.get("pipeline", "")
    try:
        training.set_training_pipeline(labeling, int(raw) if raw.isdigit() else None, request.user)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, _("Training pipeline saved."))
    return redirect("labeling:labeling-detail", project=project.slug, pk=labeling.pk)


@project_view(CONTRIBUTE, model=LabelingProject, methods=("POST",))
def labeling_train(request: HttpRequest, project: Project, labeling: LabelingProject) -> HttpResponse:
    """Train on these labels: a fresh export, and the training pipeline started on it."""
    try:
        made = training.train_on_labels(labeling, request.user)
    except (ValidationError, PermissionDenied) as exc:
        messages.error(request, " ".join(getattr(exc, "messages", [str(exc)])))
    except (LabelStudioUnavailable, LabelStudioError) as exc:
        messages.error(request, str(exc))
    else:
        messages.success(
            request, _("Exported %(ref)s and started run #%(n)s.") % {"ref": made.version.ref, "n": made.run.number}
        )
        return redirect("jobs:run-detail", project=project.slug, pk=made.run_id)
    return redirect("labeling:labeling-detail", project=project.slug, pk=labeling.pk)
