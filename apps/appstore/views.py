"""App store pages: the catalogue (cards, search, filters), an app's page (README, versions, what it creates,
resources), installing into a project (a form generated from the app's parameter schema), an installation's page
(what it made, its pipeline's last run and its service, Run and Uninstall)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET

from apps.appstore import services, tryit
from apps.appstore.filters import AppFilterSet
from apps.appstore.forms import InstallNameForm, NotebookPublishForm, PublishForm, parameter_form, parameter_values
from apps.appstore.models import App, Installation
from apps.appstore.publish import notebook_files, publish_notebook, publish_pipeline, publish_service
from apps.jobs.models import Pipeline, PipelineRun
from apps.jobs.services import start_run
from apps.models.views.markdown import render_markdown
from apps.notebooks.models import Notebook
from apps.projects.access import project_view
from apps.projects.models import Project
from apps.projects.permissions import CHANGE, CONTRIBUTE, VIEW, has_project_perm, projects_for
from apps.serving.models import Framework, InferenceService
from portal.lib.forms import add_service_errors, run_service


def _categories(apps: list[App]) -> list[str]:
    return sorted({(a.latest.metadata.get("category") or "") for a in apps if a.latest} - {""})


@login_required
@require_GET
def app_list(request: HttpRequest) -> HttpResponse:
    visible = App.objects.visible_to(request.user).select_related("project").prefetch_related("versions")
    filterset = AppFilterSet(request.GET, queryset=visible.order_by("name", "pk"))
    apps = list(filterset.qs)
    context = {"apps": apps, "filter": filterset, "categories": _categories(list(visible))}
    return render(request, "appstore/app_list.html", context)


@login_required
@require_GET
def app_detail(request: HttpRequest, pk: int) -> HttpResponse:
    app = get_object_or_404(App.objects.visible_to(request.user), pk=pk)
    version = app.latest
    if version is None:
        raise Http404
    projects = projects_for(request.user, CONTRIBUTE).order_by("name")
    context = {
        "app": app,
        "version": version,
        "readme": render_markdown(version.readme),
        "plan": services.plan(version),
        "versions": app.versions.all(),
        "projects": projects,
    }
    return render(request, "appstore/app_detail.html", context)


@project_view(CONTRIBUTE)
def app_install(request: HttpRequest, project: Project) -> HttpResponse:
    """Without `?app=`: the catalogue to choose from; with it, the app's install form."""
    ref = request.GET.get("app", "")
    if not ref:
        apps = App.objects.visible_to(request.user).prefetch_related("versions").order_by("name")
        can_publish = has_project_perm(request.user, project, CHANGE)
        pipelines = Pipeline.objects.filter(project=project).order_by("name") if can_publish else []
        served = InferenceService.objects.filter(project=project, registered_model__isnull=False).order_by("name")
        notebooks = Notebook.objects.filter(project=project).select_related("owner").order_by("name")
        installed = Installation.objects.filter(project=project).select_related("app_version__app")
        context = {
            "project": project, "apps": apps, "installations": installed, "pipelines": pipelines,
            "services": served if can_publish else [], "notebooks": notebooks if can_publish else [],
        }  # fmt: skip
        return render(request, "appstore/install_pick.html", context)
    app = App.objects.visible_to(request.user).filter(pk=int(ref) if ref.isdigit() else -1).first()
    if app is None or app.latest is None:
        raise Http404
    version = app.latest
    name_form = InstallNameForm(request.POST or None, initial={"name": app.name})
    name = request.POST.get("name") or app.name
    form = parameter_form(version, name, request.POST or None)
    if request.method == "POST" and name_form.is_valid() and form.is_valid():
        try:
            installation = services.install(
                version, project, request.user, name=name_form.cleaned_data["name"], parameters=parameter_values(form)
            )
        except ValidationError as exc:
            _spread_errors(name_form, form, exc)
        else:
            messages.success(
                request, _("Installed %(app)s as “%(name)s”.") % {"app": app.name, "name": installation.name}
            )
            return redirect("appstore:installation-detail", project=project.slug, pk=installation.pk)
    context = {"project": project, "app": app, "version": version, "name_form": name_form, "form": form,
               "plan": services.plan(version)}  # fmt: skip
    return render(request, "appstore/install_form.html", context)


def _spread_errors(name_form, form, exc: ValidationError) -> None:
    """The service's errors on the field they name; the manifest's (`spec.…`) on the form as a whole."""
    for key, messages_ in exc.message_dict.items():
        if key == "name":
            add_service_errors(name_form, ValidationError({"name": messages_}))
        elif key.startswith("parameters.") and key.removeprefix("parameters.") in form.fields:
            for message in messages_:
                form.add_error(key.removeprefix("parameters."), message)
        else:
            for message in messages_:
                form.add_error(None, f"{key}: {message}")


@project_view(VIEW, model=Installation, methods=("GET",))
def installation_detail(request: HttpRequest, project: Project, installation: Installation) -> HttpResponse:
    pipelines = installation.objects_of("pipelines")
    services_ = installation.objects_of("services")
    knowledge_bases = installation.objects_of("knowledge_bases")
    runs = PipelineRun.objects.filter(pipeline__in=pipelines).order_by("-number")[:5] if pipelines else []
    context = {
        "project": project,
        "installation": installation,
        "created": installation.created.select_related("content_type"),
        "pipelines": pipelines,
        "services": services_,
        "tryable": bool(_tryable(services_)),  # a chat model is asked through its knowledge base's chat page
        "knowledge_bases": knowledge_bases,
        "runs": runs,
        "can_contribute": has_project_perm(request.user, project, CONTRIBUTE),
    }
    return render(request, "appstore/installation_detail.html", context)


def _tryable(services_: list[InferenceService]) -> list[InferenceService]:
    """The services the Try-it form can drive: not chat models (framework llm), which answer OpenAI's chat API."""
    return [service for service in services_ if service.framework != Framework.LLM]


@project_view(CONTRIBUTE, model=Installation, methods=("POST",))
def installation_run(request: HttpRequest, project: Project, installation: Installation) -> HttpResponse:
    pipelines = installation.objects_of("pipelines")
    if not pipelines:
        messages.error(request, _("This app has no pipeline to run."))
    else:
        try:
            run = start_run(pipelines[0], request.user, trigger="manual")
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
        else:
            messages.success(request, _("Started %(run)s.") % {"run": run})
    return redirect("appstore:installation-detail", project=project.slug, pk=installation.pk)


@project_view(CONTRIBUTE, model=Installation, methods=("POST",))
def installation_uninstall(request: HttpRequest, project: Project, installation: Installation) -> HttpResponse:
    kept = services.uninstall(installation, delete_data=request.POST.get("delete_data") == "1")
    text = _("Uninstalled “%(name)s”.") % {"name": installation.name}
    if kept:
        text += " " + _("Kept: %(kept)s.") % {"kept": ", ".join(kept)}
    messages.success(request, text)
    return redirect("appstore:app-install", project=project.slug)


@project_view(VIEW, model=Installation)
def installation_try(request: HttpRequest, project: Project, installation: Installation) -> HttpResponse:
    """The demo form of the installation's service (inputs from the model's signature) and its prediction."""
    services_ = _tryable(installation.objects_of("services"))
    context: dict = {"project": project, "installation": installation, "service": services_[0] if services_ else None}
    if not services_:
        context["error"] = _("This app has no service to try.")
        return render(request, "appstore/partials/try_it.html", context)
    try:
        point = tryit.endpoint(services_[0])
        bound = (request.POST, request.FILES) if request.method == "POST" else ()
        form = tryit.demo_form_class(point)(*bound)
        context["form"], context["text"], context["image"] = form, point.text, point.image
        if request.method == "POST" and form.is_valid():
            values = {"row": form.row()} if point.image else form.cleaned_data
            prediction = tryit.predict(point, values)
            classes = point.classes
            answered = prediction.get("predict_proba") or []
            # one row: nested ([[p0, p1, …]]) or flat row-major ([p0, p1, …]), as the server chose to send it
            probabilities = answered[0] if answered and isinstance(answered[0], list) else answered[: len(classes)]
            context["prediction"] = prediction
            context["probabilities"] = list(zip(classes, probabilities, strict=False)) if classes else []
    except tryit.NotServing as exc:
        context["error"] = str(exc)
    return render(request, "appstore/partials/try_it.html", context)


def _publish_page(
    request: HttpRequest, project: Project, source: Any, kind: str, form: Any, publish: Any
) -> HttpResponse:
    """The publish form of `source`: on a valid POST, `publish(source, user, **cleaned_data)` (its field errors go on
    the form), then the app's page."""
    if request.method == "POST" and form.is_valid():
        version = run_service(form, publish, source, request.user, **form.cleaned_data)
        if version is not None:
            messages.success(request, _("Published %(v)s.") % {"v": version})
            return redirect("appstore:app-detail", pk=version.app_id)
    context = {"project": project, "source": source, "kind": kind, "form": form}
    return render(request, "appstore/publish_form.html", context)


@project_view(CHANGE, model=Pipeline)
def pipeline_publish(request: HttpRequest, project: Project, pipeline: Pipeline) -> HttpResponse:
    """A project admin publishes the pipeline (with its templates and the datasets it reads) as an app version."""
    form = PublishForm(request.POST or None, initial={"name": pipeline.name, "title": pipeline.name})
    return _publish_page(request, project, pipeline, _("pipeline"), form, publish_pipeline)


@project_view(CHANGE, model=InferenceService)
def service_publish(request: HttpRequest, project: Project, service: InferenceService) -> HttpResponse:
    """A project admin publishes the service (the model version it serves, its settings) as an app version."""
    form = PublishForm(request.POST or None, initial={"name": service.name, "title": service.name})
    return _publish_page(request, project, service, _("inference service"), form, publish_service)


@project_view(CHANGE, model=Notebook)
def notebook_publish(request: HttpRequest, project: Project, notebook: Notebook) -> HttpResponse:
    """A project admin publishes the notebook with starter files of its owner's folder as an app version."""
    paths = notebook_files(notebook)
    initial = {"name": notebook.name, "title": notebook.name, "files": [p for p in paths if p.endswith(".ipynb")]}
    form = NotebookPublishForm(request.POST or None, initial=initial, paths=paths)
    return _publish_page(request, project, notebook, _("notebook"), form, publish_notebook)


@project_view(CONTRIBUTE, model=Installation)
def installation_upgrade(request: HttpRequest, project: Project, installation: Installation) -> HttpResponse:
    """What upgrading to another version of the app changes (objects added, removed, changed), and applying it."""
    versions = list(installation.app_version.app.versions.exclude(pk=installation.app_version_id))
    wanted = request.POST.get("version") or request.GET.get("version")
    target = next((v for v in versions if v.version == wanted), versions[0] if versions else None)
    context: dict = {"project": project, "installation": installation, "versions": versions, "target": target}
    if target is not None:
        try:
            context["changes"] = services.diff(installation, target)
        except ValidationError as exc:
            context["error"] = " ".join(exc.messages)
        if request.method == "POST" and "error" not in context:
            try:
                services.upgrade(installation, target, request.user)
            except ValidationError as exc:
                context["error"] = "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
            else:
                messages.success(request, _("Upgraded to %(v)s.") % {"v": target})
                return redirect("appstore:installation-detail", project=project.slug, pk=installation.pk)
    return render(request, "appstore/installation_upgrade.html", context)
