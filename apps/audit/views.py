"""Audit log pages: a project's log for its admins, the whole log for staff; both filter and export CSV."""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET

from apps.audit.filters import AuditEntryFilterSet
from apps.audit.models import AuditEntry
from apps.projects.access import project_view
from apps.projects.models import Project
from apps.projects.permissions import CHANGE

PAGE_SIZE = 50
CSV_COLUMNS = [
    "created_at", "actor_repr", "action", "object_type", "object_id", "object_repr", "project_repr",
    "changes", "ip", "method", "path", "status", "user_agent",
]  # fmt: skip


def staff_only(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """The site-wide log is for staff: others sign in through the portal's own login, and a signed-in member who is
    not staff is told where their projects' logs are (403), not sent to the admin's login page, a dead end."""

    @wraps(view)
    @login_required
    def check(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_staff:
            raise PermissionDenied(
                _("The site-wide audit log is for staff. Each project's log is on its Audit log tab, for its admins.")
            )
        return view(request, *args, **kwargs)

    return check


class Echo:
    """csv.writer's file: hands each written row back instead of buffering it."""

    def write(self, value: str) -> str:
        return value


def csv_rows(entries: QuerySet[AuditEntry]) -> Iterator[str]:
    import json

    writer = csv.writer(Echo())
    yield writer.writerow(CSV_COLUMNS)
    for entry in entries.iterator(chunk_size=500):  # streamed: a year of log never sits in memory
        row = [getattr(entry, column) for column in CSV_COLUMNS]
        row[CSV_COLUMNS.index("created_at")] = entry.created_at.isoformat()
        row[CSV_COLUMNS.index("changes")] = json.dumps(entry.changes, sort_keys=True, default=str)
        yield writer.writerow(["" if value is None else value for value in row])


def csv_response(entries: QuerySet[AuditEntry], filename: str) -> StreamingHttpResponse:
    response = StreamingHttpResponse(csv_rows(entries), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def _log_page(request: HttpRequest, entries: QuerySet[AuditEntry], context: dict[str, Any]) -> HttpResponse:
    filterset = AuditEntryFilterSet(request.GET or None, queryset=entries.select_related("actor", "project"))
    page = Paginator(filterset.qs, PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    context.update({"filter": filterset, "page": page, "query": query.urlencode()})
    return render(request, "audit/log.html", context, status=400 if filterset.errors else 200)


@project_view(CHANGE, methods=("GET",))
def project_log(request: HttpRequest, project: Project) -> HttpResponse:
    return _log_page(request, AuditEntry.objects.filter(project=project), {"project": project, "tab": "audit"})


@project_view(CHANGE, methods=("GET",))
def project_log_csv(request: HttpRequest, project: Project) -> HttpResponse:
    filterset = AuditEntryFilterSet(request.GET or None, queryset=AuditEntry.objects.filter(project=project))
    if filterset.errors:
        return HttpResponse(_("Invalid filter."), status=400)
    return csv_response(filterset.qs, f"audit-{project.slug}.csv")


@staff_only
@require_GET
def log(request: HttpRequest) -> HttpResponse:
    return _log_page(request, AuditEntry.objects.all(), {"project": None})


@staff_only
@require_GET
def log_csv(request: HttpRequest) -> HttpResponse:
    filterset = AuditEntryFilterSet(request.GET or None, queryset=AuditEntry.objects.all())
    if filterset.errors:
        return HttpResponse(_("Invalid filter."), status=400)
    return csv_response(filterset.qs, "audit.csv")
