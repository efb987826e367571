"""Notebook pages: the project's list, a new-notebook form, a notebook's page with its live status, and the
actions (start, stop, restart, delete, settings). Every member sees the list; only the owner starts, opens and
changes a notebook; project admins may also stop or delete it."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _

from apps.notebooks import services
from apps.notebooks.culler import effective_timeout
from apps.notebooks.filters import NotebookFilterSet
from apps.notebooks.forms import NotebookForm, NotebookSettingsForm
from apps.notebooks.models import Notebook
from apps.projects.access import project_view
from apps.projects.models import Project
from apps.projects.permissions import CHANGE, CONTRIBUTE, VIEW, has_project_perm
from apps.projects.services import UNCHANGED
from apps.runtime.workload import format_memory
from portal.lib.forms import add_service_errors
from portal.lib.listing import listing


class Row:
    """A notebook as a page shows it, with what the viewer may do to it."""

    def __init__(self, notebook: Notebook, user: Any, contribute: bool, admin: bool) -> None:
        self.notebook = notebook
        self.can_operate = contribute and notebook.owner_id == user.pk
        self.can_stop = self.can_operate or admin
        self.timeout = effective_timeout(notebook)
        self.cpu = f"{float(notebook.cpu):g}"
        self.gpu = f"{float(notebook.gpu):g}" if notebook.gpu else ""
        self.memory = format_memory(notebook.memory_bytes)


def _rows(request: HttpRequest, project: Project, notebooks) -> list[Row]:
    contribute = has_project_perm(request.user, project, CONTRIBUTE)
    admin = has_project_perm(request.user, project, CHANGE)
    return [Row(nb, request.user, contribute, admin) for nb in notebooks]


@project_view(VIEW, methods=("GET",))
def notebook_list(request: HttpRequest, project: Project) -> HttpResponse:
    notebooks = (
        Notebook.objects.filter(project=project)
        .select_related("owner", "project")
        .order_by("owner__username", "name", "pk")
    )
    found = listing(request, NotebookFilterSet, notebooks)
    context = {
        "project": project,
        "listing": found,
        "rows": _rows(request, project, found.page.object_list),
        "can_create": has_project_perm(request.user, project, CONTRIBUTE),
    }
    if request.htmx:
        return render(request, "notebooks/partials/table.html", context, status=found.status)
    return render(request, "notebooks/notebook_list.html", context, status=found.status)


@project_view(CONTRIBUTE)
def notebook_create(request: HttpRequest, project: Project) -> HttpResponse:
    form = NotebookForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            notebook = services.create_notebook(project, request.user, **data)
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            if request.POST.get("start"):
                try:
                    services.start_notebook(notebook)
                except ValidationError as exc:
                    messages.error(request, " ".join(exc.messages))
            messages.success(request, _("Notebook “%(name)s” created.") % {"name": notebook.name})
            return redirect("notebooks:notebook-detail", project=project.slug, pk=notebook.pk)
    status = 400 if form.errors else 200
    return render(request, "notebooks/notebook_form.html", {"project": project, "form": form}, status=status)


def _detail_context(request: HttpRequest, project: Project, notebook: Notebook) -> dict[str, Any]:
    row = _rows(request, project, [notebook])[0]
    return {"project": project, "notebook": notebook, "row": row}


@project_view(VIEW, model=Notebook, methods=("GET",))
def notebook_detail(request: HttpRequest, project: Project, notebook: Notebook) -> HttpResponse:
    context = _detail_context(request, project, notebook)
    if context["row"].can_operate:
        context["settings_form"] = NotebookSettingsForm.for_notebook(notebook)
    return render(request, "notebooks/notebook_detail.html", context)


@project_view(VIEW, model=Notebook, methods=("GET",))
def notebook_status(request: HttpRequest, project: Project, notebook: Notebook) -> HttpResponse:
    """The live part of the notebook's page, fetched again when the project's events socket says the notebook
    changed (static/js/live.js)."""
    return render(request, "notebooks/partials/status.html", _detail_context(request, project, notebook))


@project_view(CONTRIBUTE, model=Notebook, methods=("POST",))
def notebook_settings(request: HttpRequest, project: Project, notebook: Notebook) -> HttpResponse:
    services.require(services.can_operate(request.user, notebook))
    form = NotebookSettingsForm.for_notebook(notebook, request.POST)
    if form.is_valid():
        data = {key: form.cleaned_data.get(key, UNCHANGED) for key in form.fields}
        try:
            services.update_notebook(notebook, **data)
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(request, _("Settings saved; resources and image apply at the next start."))
            return redirect("notebooks:notebook-detail", project=project.slug, pk=notebook.pk)
    context = {**_detail_context(request, project, notebook), "settings_form": form}
    return render(request, "notebooks/notebook_detail.html", context, status=400)


def _back(request: HttpRequest, project: Project, notebook: Notebook) -> HttpResponse:
    """Back where the action was taken (the list or the notebook's page)."""
    target = request.POST.get("next", "")
    if target.startswith(f"/p/{project.slug}/") and url_has_allowed_host_and_scheme(target, allowed_hosts=None):
        return redirect(target)
    return redirect("notebooks:notebook-detail", project=project.slug, pk=notebook.pk)


def _act(request: HttpRequest, project: Project, notebook: Notebook, action, allowed: bool, done: str) -> HttpResponse:
    if not allowed:
        raise PermissionDenied(_("Only the notebook's owner (or, to stop or delete it, a project admin) may do this."))
    try:
        action(notebook)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.info(request, done % {"name": notebook.name})
    return _back(request, project, notebook)


@project_view(CONTRIBUTE, model=Notebook, methods=("POST",))
def notebook_start(request: HttpRequest, project: Project, notebook: Notebook) -> HttpResponse:
    allowed = services.can_operate(request.user, notebook)
    return _act(request, project, notebook, services.start_notebook, allowed, _("Starting %(name)s."))


@project_view(CONTRIBUTE, model=Notebook, methods=("POST",))
def notebook_stop(request: HttpRequest, project: Project, notebook: Notebook) -> HttpResponse:
    allowed = services.can_stop(request.user, notebook)
    return _act(request, project, notebook, services.stop_notebook, allowed, _("Stopping %(name)s; files are kept."))


@project_view(CONTRIBUTE, model=Notebook, methods=("POST",))
def notebook_restart(request: HttpRequest, project: Project, notebook: Notebook) -> HttpResponse:
    allowed = services.can_operate(request.user, notebook)
    return _act(request, project, notebook, services.restart_notebook, allowed, _("Restarting %(name)s."))


@project_view(CONTRIBUTE, model=Notebook, methods=("POST",))
def notebook_delete(request: HttpRequest, project: Project, notebook: Notebook) -> HttpResponse:
    services.require(services.can_stop(request.user, notebook))
    name = notebook.name
    services.delete_notebook(notebook)
    messages.success(request, _("Notebook “%(name)s” deleted; its files stay in the owner's folder.") % {"name": name})
    return redirect("notebooks:notebook-list", project=project.slug)
