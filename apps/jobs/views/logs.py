"""The log pages of a pipeline run: the live viewer, the download and the search behind the viewer."""

from __future__ import annotations

import json
from collections import defaultdict

from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import render
from django.utils.http import content_disposition_header
from django.utils.translation import gettext as _

from apps.jobs import logs
from apps.jobs.models import PipelineRun, RunStatus
from apps.projects.access import project_view
from apps.projects.models import Project
from apps.projects.permissions import VIEW

MAX_DOM_LINES = 5000
MAX_QUERY_LENGTH = 200
SEARCH_LIMIT = 500


def log_viewer_context(project: Project, run: PipelineRun) -> dict[str, object]:
    """What templates/jobs/partials/log_viewer.html needs (the run page embeds it too)."""
    attempts: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for task_id, node, attempt in run.tasks.order_by("node", "attempt").values_list("pk", "node", "attempt"):
        attempts[node].append((task_id, attempt))
    nodes = [
        {"name": node, "task_ids": ",".join(str(task_id) for task_id, _a in tasks), "attempts": tasks}
        for node, tasks in attempts.items()
    ]
    return {
        "project": project,
        "run": run,
        "log_nodes": nodes,
        "log_max_lines": MAX_DOM_LINES,
        "log_status_labels": json.dumps({str(value): str(label) for value, label in RunStatus.choices}),
    }


@project_view(VIEW, model=PipelineRun, methods=("GET",))
def log_viewer(request: HttpRequest, project: Project, run: PipelineRun) -> HttpResponse:
    return render(request, "jobs/logs.html", log_viewer_context(project, run))


@project_view(VIEW, model=PipelineRun, methods=("GET",))
def log_download(request: HttpRequest, project: Project, run: PipelineRun) -> StreamingHttpResponse:
    node = request.GET.get("node") or None
    # Under ASGI Django reads a synchronous iterator into memory before sending it: give it an async one.
    content = (
        logs.aiter_text(run, node) if isinstance(request, ASGIRequest) else logs.join_chunks(logs.iter_text(run, node))
    )
    response = StreamingHttpResponse(content, content_type="text/plain; charset=utf-8")
    name = f"{run.pipeline_name}-{run.number}" + (f"-{node}" if node else "")
    response["Content-Disposition"] = content_disposition_header(as_attachment=True, filename=f"{name}.log")
    return response


def _error(message: str) -> JsonResponse:
    return JsonResponse({"error": message}, status=400)


@project_view(VIEW, model=PipelineRun, methods=("GET",))
def log_search(request: HttpRequest, project: Project, run: PipelineRun) -> JsonResponse:
    """`?q=` (with `&node=`): {"matches": [...]}; `?first_error=1`: {"line": ... or null}."""
    if request.GET.get("first_error") in ("1", "true"):
        return JsonResponse({"line": logs.first_error(run)})
    q = request.GET.get("q")
    if q is None:  # nothing asked yet
        return JsonResponse({"matches": [], "truncated": False})
    if not q.strip():
        return _error(_("Enter some text to search for."))
    if len(q) > MAX_QUERY_LENGTH:
        return _error(_("Search for at most %(max)d characters.") % {"max": MAX_QUERY_LENGTH})
    matches = logs.search(run, q, node=request.GET.get("node") or None, limit=SEARCH_LIMIT)
    return JsonResponse({"matches": matches, "truncated": len(matches) >= SEARCH_LIMIT})
