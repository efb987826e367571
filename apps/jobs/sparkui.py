"""The Spark UI of a task running locally, reached through the portal at `/task/<pk>/spark/…` (docs/spark.md).

A Spark template's task (`framework: spark`) on the local runtime gets a free loopback port for its UI when it is
dispatched: the port is one of the workload's `ports` (so the sandbox forwards it in, as for a notebook's server, and
the runtime's row records it with the rest of the spec), and the task is told it and its base path through
PORTAL_SPARK_UI_PORT / PORTAL_SPARK_UI_BASE (spark.ui.port, spark.ui.proxyBase: the UI's links then point under the
proxy). While the task runs, whoever may view the project may read its UI: GET and HEAD only, the UI's kill links
turned off. Who may: the same checks as every tenant object (another project's task, or none: 404). The relaying is
the notebook proxy's (portal/lib/proxy.py). Once the task ended, the proxy answers 410 with a page saying so.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx
from asgiref.sync import sync_to_async
from django.contrib.auth.views import redirect_to_login
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext as _

from apps.jobs.models import TASK_FINISHED, TaskRun, TaskStatus
from apps.projects.permissions import VIEW
from apps.runtime.models import LocalWorkload
from apps.runtime.workload import Workload
from portal.lib.proxy import forward

PORT_NAME = "spark-ui"  # the workload's port (a Kubernetes-style port name)
FRAMEWORK = "spark"
LABEL = "spark ui proxy"


def base_path(task_pk: int) -> str:
    """Where the task's UI is under the portal (spark.ui.proxyBase: no trailing slash)."""
    return f"/task/{task_pk}/spark"


def open_ui(task: TaskRun, workload: Workload, port: int) -> Workload:
    """`workload` (a Spark task's, run locally) serving its UI on `port`, and told so through its env."""
    workload.ports = {**workload.ports, PORT_NAME: port}
    workload.env = {
        **workload.env,
        "PORTAL_SPARK_UI_PORT": str(port),
        "PORTAL_SPARK_UI_BASE": base_path(task.pk),
    }
    return workload


def ui_ports(tasks: list[TaskRun]) -> dict[int, int]:
    """{task pk: UI port} of those of `tasks` that run locally now with a Spark UI (one query)."""
    handles = {t.handle: t.pk for t in tasks if t.status == TaskStatus.RUNNING and t.runtime == "local" and t.handle}
    if not handles:
        return {}
    rows = LocalWorkload.objects.filter(uid__in=handles, spec__ports__has_key=PORT_NAME).values_list("uid", "spec")
    return {handles[uid]: int(spec["ports"][PORT_NAME]) for uid, spec in rows}


def visible_task(user: Any, pk: int) -> TaskRun | None:
    """The task `pk` if `user` may view its project (else None: 404 as for any other tenant object)."""
    return TaskRun.objects.for_user(user, VIEW).filter(pk=pk).select_related("run__project").first()


def upstream_url(port: int, task_pk: int, request: HttpRequest, path: str) -> str:
    """The UI's own URL of this request: the path after the proxy's prefix, as the browser encoded it."""
    prefix = base_path(task_pk)
    raw = (request.scope.get("raw_path") or b"").decode("latin-1")
    target = raw[len(prefix) :] if raw.startswith(prefix + "/") else "/" + quote(path, safe="/:@!$&'()*+,;=~")
    query = request.META.get("QUERY_STRING", "")  # the ASGI scope's query_string, decoded as latin-1
    return f"http://127.0.0.1:{port}{target}" + (f"?{query}" if query else "")


async def unavailable(request: HttpRequest, task: TaskRun, status: int, title: str, reason: str) -> HttpResponse:
    """A page of the portal's own in place of the UI, with the way back to the task's run."""
    run = task.run
    run_url = reverse("jobs:run-detail", kwargs={"project": run.project.slug, "pk": run.pk})
    context = {"task": task, "title": title, "reason": reason, "run_url": f"{run_url}#node-{task.node}"}
    response = await sync_to_async(render)(request, "jobs/spark_ui_unavailable.html", context, status=status)
    if status == 503:
        response["Retry-After"] = "5"
        response["Refresh"] = "3"  # reload until it runs (a header: the page's CSP allows no script for this)
    return response


async def spark_ui_proxy(request: HttpRequest, pk: int, path: str = "") -> HttpResponseBase:
    """GET/HEAD under `/task/<pk>/spark/`: checked here, then relayed to the task's Spark UI."""
    user = await request.auser()
    if not user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    task = await sync_to_async(visible_task)(user, pk)
    if task is None or any(segment in (".", "..") for segment in path.split("/")):
        raise Http404(_("No such task."))
    if request.method not in ("GET", "HEAD"):
        response = HttpResponse(_("The Spark UI is read-only through the portal."), status=405)
        response["Allow"] = "GET, HEAD"
        return response
    port = (await sync_to_async(ui_ports)([task])).get(task.pk)
    if port is None:
        if task.status in TASK_FINISHED:
            title = _("The Spark UI is gone")
            reason = _("The task ended (%(status)s): its Spark UI ended with it. Its logs stay on the run's page.") % {
                "status": task.get_status_display()
            }
            return await unavailable(request, task, 410, title, reason)
        if task.status in (TaskStatus.WAITING, TaskStatus.QUEUED):
            title = _("The task has not started")
            reason = _("Its Spark UI opens once it runs (it is “%(status)s”).") % {"status": task.get_status_display()}
            return await unavailable(request, task, 503, title, reason)
        raise Http404(_("This task has no Spark UI (only Spark templates run on this machine have one)."))
    try:
        return await forward(request, upstream_url(port, task.pk, request, path), label=LABEL, base=base_path(task.pk))
    except httpx.HTTPError as exc:
        reason = _("The Spark UI did not answer (%(error)s): Spark may still be starting, or be stopping.") % {
            "error": type(exc).__name__
        }
        return await unavailable(request, task, 502, _("The Spark UI is unreachable"), reason)
