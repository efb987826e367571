from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods

from apps.projects import secrets, services
from apps.projects.access import project_view
from apps.projects.forms import (
    InviteForm,
    ProjectCreateForm,
    ProjectSettingsForm,
    RoleForm,
    SecretForm,
    SecretReplaceForm,
    TransferForm,
)
from apps.projects.models import Membership, Project, ProjectSecret, Role
from apps.projects.permissions import CHANGE, CONTRIBUTE, DELETE, MANAGE_MEMBERS, TRANSFER, VIEW, has_project_perm
from portal.lib.errors import Conflict
from portal.lib.forms import run_service


@login_required
@require_http_methods(["GET", "POST"])
def project_create(request: HttpRequest) -> HttpResponse:
    form = ProjectCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        project = run_service(form, services.create_project, request.user, **form.cleaned_data)
        if project is not None:
            messages.success(request, _("Project “%(name)s” created.") % {"name": project.name})
            return redirect("projects:overview", project=project.slug)
    return render(request, "projects/project_form.html", {"form": form}, status=400 if form.errors else 200)


def _member_context(request: HttpRequest, project: Project) -> dict[str, Any]:
    can_manage = has_project_perm(request.user, project, MANAGE_MEMBERS)
    is_owner = has_project_perm(request.user, project, TRANSFER)
    memberships = project.memberships.select_related("user").order_by("-role", "user__username")
    return {
        "project": project,
        "memberships": memberships,
        "can_manage": can_manage,
        "is_owner": is_owner,
        "role_form": RoleForm(include_owner=is_owner),
        "owner_role": Role.OWNER,
    }


@project_view(CHANGE)
def project_settings(request: HttpRequest, project: Project) -> HttpResponse:
    form = ProjectSettingsForm.for_project(project, request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        update = {"name": data["name"], "description": data["description"], "runtime": data["runtime"]}
        update["notebook_idle_timeout"] = data["notebook_idle_timeout"]
        if run_service(form, services.update_project, project, **update):
            messages.success(request, _("Settings saved."))
            return redirect("projects:overview", project=project.slug)
    return render(
        request,
        "projects/settings.html",
        {"project": project, "form": form, "can_delete": has_project_perm(request.user, project, DELETE)},
        status=400 if form.errors else 200,
    )


@project_view(DELETE)
def project_delete(request: HttpRequest, project: Project) -> HttpResponse:
    if request.method == "POST":
        if request.POST.get("confirm") != project.slug:
            messages.error(request, _("Type the project's slug to confirm."))
            return render(request, "projects/delete.html", {"project": project}, status=400)
        name = project.name
        try:
            services.delete_project(project)
        except Conflict as exc:
            messages.error(request, exc.message)
            return render(request, "projects/delete.html", {"project": project}, status=409)
        messages.success(request, _("Project “%(name)s” deleted.") % {"name": name})
        return redirect("projects:dashboard")
    return render(request, "projects/delete.html", {"project": project})


@project_view(VIEW, methods=("GET",))
def member_list(request: HttpRequest, project: Project) -> HttpResponse:
    context = _member_context(request, project)
    context["invite_form"] = InviteForm(include_owner=context["is_owner"])
    context["transfer_form"] = TransferForm()
    return render(request, "projects/members.html", context)


def _members_response(request: HttpRequest, project: Project, **extra: Any) -> HttpResponse:
    """htmx swaps the members panel in place; a plain POST goes back to the page."""
    if request.htmx:
        context = _member_context(request, project)
        context.update(extra)
        context.setdefault("invite_form", InviteForm(include_owner=context["is_owner"]))
        # 200 even when the panel carries errors: htmx 2 does not swap 4xx responses by default, so a 400
        # would leave the old panel in place and the error unseen.
        return render(request, "projects/partials/members_panel.html", context)
    for form in extra.values():
        for error in getattr(form, "errors", {}).values():
            messages.error(request, " ".join(error))
    return redirect("projects:members", project=project.slug)


@project_view(MANAGE_MEMBERS, methods=("POST",))
def member_invite(request: HttpRequest, project: Project) -> HttpResponse:
    is_owner = has_project_perm(request.user, project, TRANSFER)
    form = InviteForm(request.POST, include_owner=is_owner)
    if form.is_valid() and run_service(
        form, services.invite_member, project, request.user, form.cleaned_data["user"], form.chosen_role
    ):
        messages.success(request, _("%(user)s added.") % {"user": form.cleaned_data["user"]})
        form = InviteForm(include_owner=is_owner)
    return _members_response(request, project, invite_form=form)


@project_view(MANAGE_MEMBERS, model=Membership, methods=("POST",))
def member_role(request: HttpRequest, project: Project, membership: Membership) -> HttpResponse:
    form = RoleForm(request.POST, include_owner=has_project_perm(request.user, project, TRANSFER))
    if form.is_valid():
        run_service(form, services.change_role, membership, request.user, form.chosen_role)
    return _members_response(request, project, role_form=form)


@project_view(MANAGE_MEMBERS, model=Membership, methods=("POST",))
def member_remove(request: HttpRequest, project: Project, membership: Membership) -> HttpResponse:
    form = forms.Form(request.POST)
    run_service(form, services.remove_member, membership, request.user)
    return _members_response(request, project, remove_form=form)


@project_view(TRANSFER, methods=("POST",))
def project_transfer(request: HttpRequest, project: Project) -> HttpResponse:
    form = TransferForm(request.POST)
    if form.is_valid() and run_service(
        form, services.transfer_ownership, project, request.user, form.cleaned_data["user"]
    ):
        messages.success(request, _("Ownership transferred to %(user)s.") % {"user": form.cleaned_data["user"]})
    return _members_response(request, project, transfer_form=form)


@project_view(VIEW, methods=("POST",))
def project_leave(request: HttpRequest, project: Project) -> HttpResponse:
    try:
        services.leave_project(project, request.user)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect("projects:members", project=project.slug)
    messages.success(request, _("You left %(project)s.") % {"project": project.name})
    return redirect("projects:dashboard")


# --- Secrets: names and descriptions are shown, values never (write-only) ---------------------------------


def _secrets_page(
    request: HttpRequest, project: Project, form: SecretForm | None = None, status: int = 200
) -> HttpResponse:
    can_edit = has_project_perm(request.user, project, CONTRIBUTE)
    context = {
        "project": project,
        "tab": "secrets",
        "secrets": project.secrets.select_related("created_by").only(
            "pk", "name", "description", "updated_at", "created_by__username"
        ),
        "can_edit": can_edit,
        "form": form or (SecretForm() if can_edit else None),
        "replace_form": SecretReplaceForm(),
    }
    return render(request, "projects/secrets.html", context, status=status)


@project_view(VIEW, methods=("GET",))
def secret_list(request: HttpRequest, project: Project) -> HttpResponse:
    return _secrets_page(request, project)


@project_view(CONTRIBUTE, methods=("POST",))
def secret_create(request: HttpRequest, project: Project) -> HttpResponse:
    form = SecretForm(request.POST)
    if form.is_valid() and run_service(form, secrets.create_secret, project, request.user, **form.cleaned_data):
        messages.success(request, _("Secret %(name)s saved.") % {"name": form.cleaned_data["name"]})
        return redirect("projects:secrets", project=project.slug)
    return _secrets_page(request, project, form, status=400)


@project_view(CONTRIBUTE, model=ProjectSecret, methods=("POST",))
def secret_replace(request: HttpRequest, project: Project, secret: ProjectSecret) -> HttpResponse:
    form = SecretReplaceForm(request.POST)
    if form.is_valid() and run_service(form, secrets.update_secret, secret, value=form.cleaned_data["value"]):
        messages.success(request, _("The value of %(name)s was replaced.") % {"name": secret.name})
    else:
        messages.error(request, _("%(name)s: a new value is required.") % {"name": secret.name})
    return redirect("projects:secrets", project=project.slug)


@project_view(CONTRIBUTE, model=ProjectSecret, methods=("POST",))
def secret_delete(request: HttpRequest, project: Project, secret: ProjectSecret) -> HttpResponse:
    name = secret.name
    secrets.delete_secret(secret)
    messages.success(request, _("Secret %(name)s deleted.") % {"name": name})
    return redirect("projects:secrets", project=project.slug)
