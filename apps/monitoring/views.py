"""Drift monitor pages: the project's list, a monitor's page (latest report per feature, the chart of each feature's
score over time, the report history), the create and edit forms, and the run-now and delete actions."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _

from apps.monitoring import services
from apps.monitoring.filters import DriftMonitorFilterSet
from apps.monitoring.forms import MonitorForm
from apps.monitoring.models import DriftMonitor
from apps.projects.access import project_view
from apps.projects.models import Project
from apps.projects.permissions import CONTRIBUTE, VIEW, has_project_perm
from portal.lib.forms import run_service


@project_view(VIEW, methods=("GET",))
def monitor_list(request: HttpRequest, project: Project) -> HttpResponse:
    monitors = DriftMonitor.objects.filter(project=project).select_related("service", "reference_version__dataset")
    filters = DriftMonitorFilterSet(request.GET, queryset=monitors)
    rows = [(m, m.latest_report()) for m in filters.qs]
    context = {"project": project, "rows": rows, "can_create": has_project_perm(request.user, project, CONTRIBUTE)}
    return render(request, "monitoring/monitor_list.html", context)


@project_view(CONTRIBUTE)
def monitor_create(request: HttpRequest, project: Project) -> HttpResponse:
    form = MonitorForm(project, request.POST or None, initial={"service": request.GET.get("service", "")})
    if request.method == "POST" and form.is_valid():
        settings = {"service": form.cleaned_data["service"], **form.settings()}
        monitor = run_service(form, lambda: services.create_monitor(project, request.user, **settings))
        if monitor is not None:
            messages.success(request, _("Drift monitor of “%(name)s” created.") % {"name": monitor.service.name})
            return redirect("monitoring:monitor-detail", project=project.slug, pk=monitor.pk)
    status = 400 if form.errors else 200
    context = {"project": project, "form": form, "monitor": None}
    return render(request, "monitoring/monitor_form.html", context, status=status)


@project_view(CONTRIBUTE, model=DriftMonitor)
def monitor_edit(request: HttpRequest, project: Project, monitor: DriftMonitor) -> HttpResponse:
    form = MonitorForm(project, request.POST or None, monitor=monitor)
    posted = request.method == "POST" and form.is_valid()
    if posted and run_service(form, services.update_monitor, monitor, **form.settings()) is not None:
        messages.success(request, _("Drift monitor saved."))
        return redirect("monitoring:monitor-detail", project=project.slug, pk=monitor.pk)
    status = 400 if form.errors else 200
    context = {"project": project, "form": form, "monitor": monitor}
    return render(request, "monitoring/monitor_form.html", context, status=status)


@project_view(VIEW, model=DriftMonitor, methods=("GET",))
def monitor_detail(request: HttpRequest, project: Project, monitor: DriftMonitor) -> HttpResponse:
    reports = list(monitor.reports.select_related("reference_version__dataset").order_by("-created_at", "-pk")[:50])
    latest = reports[0] if reports else None
    features = sorted((latest.features or {}).items(), key=lambda kv: -kv[1]["score"]) if latest else []
    context = {
        "project": project,
        "monitor": monitor,
        "latest": latest,
        "features": features,
        "reports": reports,
        "chart": services.series(monitor),
        "can_contribute": has_project_perm(request.user, project, CONTRIBUTE),
    }
    return render(request, "monitoring/monitor_detail.html", context)


@project_view(CONTRIBUTE, model=DriftMonitor, methods=("POST",))
def monitor_run(request: HttpRequest, project: Project, monitor: DriftMonitor) -> HttpResponse:
    report = services.run_monitor(monitor)
    messages.info(request, _("Checked: %(status)s. %(message)s") % {
        "status": report.get_status_display(), "message": report.message})  # fmt: skip
    return redirect("monitoring:monitor-detail", project=project.slug, pk=monitor.pk)


@project_view(CONTRIBUTE, model=DriftMonitor, methods=("POST",))
def monitor_delete(request: HttpRequest, project: Project, monitor: DriftMonitor) -> HttpResponse:
    services.delete_monitor(monitor)
    messages.success(request, _("Drift monitor deleted."))
    return redirect("monitoring:monitor-list", project=project.slug)
