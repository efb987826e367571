"""The pages that gather several apps: home (my projects, runs, notebooks and services) and a project's overview
(its runs, queue, usage and storage against the quota). Their URL names stay in the `projects` namespace
(`projects:dashboard`, `projects:overview`): apps/console/urls.py adds them to it."""

from __future__ import annotations

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_http_methods

from apps.console import dashboards, search
from apps.jobs.models import run_status_labels
from apps.projects.access import project_view
from apps.projects.models import Membership, Project, Role
from apps.projects.permissions import VIEW


@login_required
@require_http_methods(["GET"])
def dashboard(request: HttpRequest) -> HttpResponse:
    """Home: my projects, my active and recent runs (live progress), my notebooks and my projects' services. An
    htmx request gets the notebooks-and-services section alone (the page redraws it from there on a project's
    notebook or service event)."""
    if request.htmx:
        return render(request, "console/partials/home_workspaces.html", dashboards.workspaces(request.user))
    home = dashboards.home(request.user)
    context = {
        "home": home,
        "memberships": home.memberships,
        "live_projects": home.live_projects,
        **{key: getattr(home, key) for key in ("notebooks", "notebook_count", "services", "service_count")},
        "status_labels": run_status_labels(),
    }
    return render(request, "console/dashboard.html", context)


@project_view(VIEW, methods=("GET",))
def project_overview(request: HttpRequest, project: Project) -> HttpResponse:
    my_role = Membership.objects.filter(project=project, user=request.user).values_list("role", flat=True).first()
    return render(
        request,
        "console/overview.html",
        {
            "project": project,
            "my_role": Role(my_role).label if my_role else None,
            "member_count": project.memberships.count(),
            "stats": dashboards.overview(project),
            "window_days": dashboards.WINDOW_DAYS,
            "status_labels": run_status_labels(),
        },
    )


class SearchForm(forms.Form):
    q = forms.CharField(label=_("Search"), max_length=search.MAX_QUERY, required=False, strip=True)


@login_required
@require_http_methods(["GET"])
def search_page(request: HttpRequest) -> HttpResponse:
    """The navbar's search box: projects, pipelines, runs, datasets, models and services by name, in my projects."""
    form = SearchForm(request.GET)
    groups = search.search(request.user, form.cleaned_data["q"]) if form.is_valid() else []
    query = form.cleaned_data.get("q", "") if form.is_valid() else ""
    return render(
        request,
        "console/search.html",
        {"form": form, "query": query, "groups": groups, "found": sum(len(g.hits) for g in groups)},
        status=200 if form.is_valid() else 400,
    )
