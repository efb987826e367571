"""Continuous training pages: the policies with their data monitors and retrainings, a policy's and a monitor's
forms, a monitor's checks, and the decisions (the approval inbox on top, then every decision with both metrics)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _

from apps.projects.access import project_view
from apps.projects.models import Project
from apps.projects.permissions import CHANGE, CONTRIBUTE, VIEW, has_project_perm
from apps.retraining import gate, services
from apps.retraining.filters import PromotionDecisionFilterSet
from apps.retraining.forms import DataMonitorForm, PolicyForm
from apps.retraining.models import DataMonitor, PromotionDecision, Retraining, RetrainPolicy
from portal.lib.errors import Conflict
from portal.lib.forms import run_service


@project_view(VIEW, methods=("GET",))
def policy_list(request: HttpRequest, project: Project) -> HttpResponse:
    context = {
        "project": project,
        "policies": RetrainPolicy.objects.filter(project=project).select_related(
            "pipeline", "dataset", "registered_model", "drift_monitor__service"),
        "monitors": DataMonitor.objects.filter(project=project).select_related("dataset", "policy"),
        "retrainings": Retraining.objects.filter(project=project).select_related(
            "policy", "run", "dataset_version__dataset")[:30],
        "pending": PromotionDecision.objects.filter(project=project, outcome=PromotionDecision.Outcome.PENDING).count(),
        "can_contribute": has_project_perm(request.user, project, CONTRIBUTE),
    }  # fmt: skip
    return render(request, "retraining/policy_list.html", context)


def _form_page(request: HttpRequest, project: Project, form: Any, save: Callable[[], Any], title: str) -> HttpResponse:
    if request.method == "POST" and form.is_valid() and run_service(form, save) is not None:
        messages.success(request, _("Saved."))
        return redirect("retraining:policy-list", project=project.slug)
    status = 400 if form.errors else 200
    return render(request, "retraining/form.html", {"project": project, "form": form, "title": title}, status=status)


@project_view(CONTRIBUTE)
def policy_create(request: HttpRequest, project: Project) -> HttpResponse:
    form = PolicyForm(project, request.POST or None)
    return _form_page(request, project, form, lambda: services.create_policy(project, request.user, **form.settings()),
                      _("New retrain policy"))  # fmt: skip


@project_view(CONTRIBUTE, model=RetrainPolicy)
def policy_edit(request: HttpRequest, project: Project, policy: RetrainPolicy) -> HttpResponse:
    form = PolicyForm(project, request.POST or None, policy=policy)
    return _form_page(request, project, form, lambda: services.update_policy(policy, **form.settings()),
                      _("Retrain policy %(name)s") % {"name": policy.name})  # fmt: skip


@project_view(CONTRIBUTE, model=RetrainPolicy, methods=("POST",))
def policy_trigger(request: HttpRequest, project: Project, policy: RetrainPolicy) -> HttpResponse:
    retraining = services.start_policy(policy, Retraining.Reason.MANUAL, detail=f"by {request.user}")
    level = messages.SUCCESS if retraining.run_id else messages.WARNING
    messages.add_message(request, level, retraining.message)
    return redirect("retraining:policy-list", project=project.slug)


@project_view(CONTRIBUTE, model=RetrainPolicy, methods=("POST",))
def policy_delete(request: HttpRequest, project: Project, policy: RetrainPolicy) -> HttpResponse:
    services.delete_policy(policy)
    messages.success(request, _("Retrain policy deleted."))
    return redirect("retraining:policy-list", project=project.slug)


@project_view(CONTRIBUTE)
def monitor_create(request: HttpRequest, project: Project) -> HttpResponse:
    form = DataMonitorForm(project, request.POST or None)
    return _form_page(request, project, form, lambda: services.create_monitor(project, request.user,
                      **form.settings()), _("New data monitor"))  # fmt: skip


@project_view(VIEW, model=DataMonitor, methods=("GET",))
def monitor_detail(request: HttpRequest, project: Project, monitor: DataMonitor) -> HttpResponse:
    checks = monitor.checks.select_related("version__dataset", "previous__dataset")[:50]
    context = {"project": project, "monitor": monitor, "checks": checks,
               "can_contribute": has_project_perm(request.user, project, CONTRIBUTE)}  # fmt: skip
    return render(request, "retraining/monitor_detail.html", context)


@project_view(CONTRIBUTE, model=DataMonitor, methods=("POST",))
def monitor_delete(request: HttpRequest, project: Project, monitor: DataMonitor) -> HttpResponse:
    services.delete_monitor(monitor)
    messages.success(request, _("Data monitor deleted."))
    return redirect("retraining:policy-list", project=project.slug)


@project_view(VIEW, methods=("GET",))
def decision_list(request: HttpRequest, project: Project) -> HttpResponse:
    decisions = PromotionDecision.objects.filter(project=project).select_related(
        "policy", "registered_model", "challenger", "champion", "previous", "decided_by", "rolled_back_by"
    )
    filters = PromotionDecisionFilterSet(request.GET, queryset=decisions)
    rows = list(filters.qs[:100])
    context = {
        "project": project,
        "pending": [d for d in rows if d.outcome == PromotionDecision.Outcome.PENDING],
        "decisions": rows,
        "can_approve": has_project_perm(request.user, project, CHANGE),
        "can_contribute": has_project_perm(request.user, project, CONTRIBUTE),
    }
    return render(request, "retraining/decision_list.html", context)


def _act(request: HttpRequest, project: Project, decision: PromotionDecision, act: Callable, done: str) -> HttpResponse:
    try:
        act(decision, request.user)
    except Conflict as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, done)
    return redirect("retraining:decision-list", project=project.slug)


@project_view(CHANGE, model=PromotionDecision, methods=("POST",))
def decision_approve(request: HttpRequest, project: Project, decision: PromotionDecision) -> HttpResponse:
    return _act(request, project, decision, gate.approve, _("Approved: the alias points at the new version."))


@project_view(CHANGE, model=PromotionDecision, methods=("POST",))
def decision_reject(request: HttpRequest, project: Project, decision: PromotionDecision) -> HttpResponse:
    return _act(request, project, decision, gate.reject, _("Rejected: the alias stays where it was."))


@project_view(CONTRIBUTE, model=PromotionDecision, methods=("POST",))
def decision_rollback(request: HttpRequest, project: Project, decision: PromotionDecision) -> HttpResponse:
    return _act(request, project, decision, gate.roll_back, _("Rolled back: the alias points at the previous version."))
