from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _

from apps.datasets.models import DatasetUsage
from apps.jobs import services, sparkui
from apps.jobs.filters import RunListFilterSet
from apps.jobs.graph import layout
from apps.jobs.models import TASK_FINISHED, PipelineRun, TaskStatus, run_status_labels
from apps.jobs.orchestrator import latest_tasks
from apps.jobs.views.logs import log_viewer_context
from apps.projects.access import project_view
from apps.projects.models import Project
from apps.projects.permissions import CONTRIBUTE, VIEW, has_project_perm
from portal.lib.listing import listing


@project_view(VIEW, methods=("GET",))
def run_list(request: HttpRequest, project: Project) -> HttpResponse:
    runs = PipelineRun.objects.filter(project=project).select_related("created_by").with_progress()
    found = listing(request, RunListFilterSet, runs)
    # The active runs' rows follow their status live (static/js/dashboards.js), with these words for the badges.
    context = {"project": project, "listing": found, "page": found.page, "status_labels": run_status_labels()}
    return render(request, "jobs/run_list.html", context, status=found.status)


def dataset_usages(run: PipelineRun) -> list:
    """The dataset versions the run read and wrote (lineage)."""
    return list(
        DatasetUsage.objects.filter(pipeline_run=run).select_related("version__dataset", "task_run").order_by("pk")
    )


def _summary_context(request: HttpRequest, project: Project, run: PipelineRun) -> dict:
    """What the page's header and node table show (jobs/partials/run_header.html and run_tasks.html)."""
    tasks = latest_tasks(run)
    nodes = [n["name"] for n in run.spec.get("nodes", [])]
    done = sum(1 for t in tasks.values() if t.status in TASK_FINISHED)
    return {
        "project": project,
        "run": run,
        "tasks": tasks,
        "nodes": nodes,
        "rows": [(name, tasks.get(name)) for name in nodes],
        "attempts": run.tasks.order_by("node", "attempt"),
        "done": done,
        "can_act": has_project_perm(request.user, project, CONTRIBUTE),
        "dataset_usages": dataset_usages(run),
        "spark_ui": sparkui.ui_ports(list(tasks.values())),  # running Spark tasks' UIs (their link while they run)
    }


@project_view(VIEW, model=PipelineRun, methods=("GET",))
def run_detail(request: HttpRequest, project: Project, run: PipelineRun) -> HttpResponse:
    """Live node colours, progress, per-node timing and waiting reasons, resource usage, and the log viewer."""
    context = _summary_context(request, project, run)
    tasks, nodes, done = context["tasks"], context["nodes"], context["done"]
    context.update(
        graph=layout(run.spec),
        statuses={name: (tasks[name].status if name in tasks else "pending") for name in nodes},
        total=len(nodes),
        percent=int(100 * done / len(nodes)) if nodes else 100,
        running=sum(1 for t in tasks.values() if t.status == TaskStatus.RUNNING),
        usage_warnings=[(t, w) for t in context["attempts"] for w in t.resource_warnings],
        **log_viewer_context(project, run),
    )
    return render(request, "jobs/run_detail.html", context)


@project_view(VIEW, model=PipelineRun, methods=("GET",))
def run_summary(request: HttpRequest, project: Project, run: PipelineRun) -> HttpResponse:
    """The header (status, actions) and the node table (timings, re-run buttons), drawn as the page draws them:
    the page swaps them in when nodes finish and when the run ends, instead of reloading itself."""
    return render(request, "jobs/partials/run_summary.html", _summary_context(request, project, run))


@project_view(CONTRIBUTE, model=PipelineRun, methods=("POST",))
def run_cancel(request: HttpRequest, project: Project, run: PipelineRun) -> HttpResponse:
    services.cancel_run(run)
    messages.info(request, _("Cancelling %(run)s.") % {"run": run})
    return redirect("jobs:run-detail", project=project.slug, pk=run.pk)


@project_view(CONTRIBUTE, model=PipelineRun, methods=("POST",))
def run_rerun(request: HttpRequest, project: Project, run: PipelineRun) -> HttpResponse:
    """Retry (no node: whatever did not succeed) or re-run from a node."""
    try:
        new = services.rerun_from(run, request.user, node=request.POST.get("node") or None)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect("jobs:run-detail", project=project.slug, pk=run.pk)
    return redirect("jobs:run-detail", project=project.slug, pk=new.pk)
