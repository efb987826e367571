"""Writing audit entries: from a request's collected changes (the middleware) or directly (`record`)."""

from __future__ import annotations

import json
import logging
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.urls import Resolver404, resolve

from apps.accounts.models import ApiToken, hash_token
from apps.audit.capture import Change, Collector, label_of, resolve_project_id
from apps.audit.models import AuditEntry
from apps.models.models import Run
from apps.projects.models import Project

logger = logging.getLogger(__name__)

CRUD_ACTIONS = frozenset({"create", "update", "partial_update", "destroy", "list", "retrieve"})
METHOD_ACTIONS = {"POST": "create", "PUT": "update", "PATCH": "update", "DELETE": "delete"}
# Keys of an MLflow request body that name its object (the run, experiment or model it acts on).
MLFLOW_OBJECT_KEYS = ("run_id", "run_uuid", "experiment_id", "model_id", "name")


def record(
    *,
    action: str,
    actor: Any = None,
    token: Any = None,
    obj: Any = None,
    project: Any = None,
    changes: dict | None = None,
    request: HttpRequest | None = None,
    status: int | None = None,
) -> AuditEntry:
    """Write one entry for an action that did not come through a request the middleware watched."""
    entry = AuditEntry(action=action, changes=changes or {}, status=status)
    _set_actor(entry, actor, token)
    if obj is not None:
        entry.object_type, entry.object_id, entry.object_repr = label_of(type(obj)), str(obj.pk), str(obj)[:200]
        project = project if project is not None else _project_by_id(resolve_project_id(obj))
    _set_project(entry, project)
    if request is not None:
        _set_request(entry, request)
    entry.save()
    return entry


def record_request(request: HttpRequest, response: HttpResponse, collector: Collector) -> AuditEntry:
    """The one entry of a successful mutating request: its primary object, the action and the changed fields."""
    entry = AuditEntry(status=response.status_code)
    _set_request(entry, request)
    actor, token = request_actor(request)
    if collector.event is not None:
        actor = collector.event_user if collector.event_user is not None else actor
    _set_actor(entry, actor, token)

    interesting = collector.interesting()
    primary: Change | None = interesting[0] if interesting else None
    project_id: int | None = None
    if primary is not None:
        entry.object_type, entry.object_id, entry.object_repr = primary.label, primary.pk, primary.repr
        entry.changes = primary.changes
        project_id = primary.project_id if primary.kind == "delete" else _project_of(primary)
    elif collector.event is not None and actor is not None:
        entry.object_type, entry.object_id, entry.object_repr = actor._meta.label_lower, str(actor.pk), str(actor)
    else:
        project_id = _set_object_from_url(entry, request)
    entry.action = collector.event or _action_name(request, primary)
    project = _project_by_id(project_id) or _project_from_url(request)
    _set_project(entry, project)
    entry.save()
    return entry


# --- who --------------------------------------------------------------------------------------------------------


def request_actor(request: HttpRequest) -> tuple[Any, Any]:
    """(user, token) of a request once the view ran: DRF copies its authentication onto the Django request;
    the MLflow API authenticates by itself, so its token is looked up again from the header."""
    user = getattr(request, "user", None)
    auth = getattr(request, "auth", None)
    token = auth if isinstance(auth, ApiToken) else None
    if user is not None and user.is_authenticated:
        return user, token
    raw = raw_token(request.headers.get("Authorization", ""))
    if raw:
        token = ApiToken.objects.select_related("user").filter(digest=hash_token(raw)).first()
        if token is not None:
            return token.user, token
    return None, None


def raw_token(header: str) -> str | None:
    import base64
    import binascii

    parts = header.split()
    if len(parts) != 2:
        return None
    kind, value = parts[0].lower(), parts[1]
    if kind in ("bearer", "token"):
        return value
    if kind == "basic":  # MLflow clients send the token as the Basic password
        try:
            return base64.b64decode(value).decode("utf-8").partition(":")[2] or None
        except (binascii.Error, UnicodeDecodeError):
            return None
    return None


def _set_actor(entry: AuditEntry, actor: Any, token: Any) -> None:
    if actor is not None and getattr(actor, "is_authenticated", False):
        entry.actor, entry.actor_repr = actor, actor.get_username()[:150]
    if token is not None and token.pk is not None:
        entry.token = token


# --- where and what ---------------------------------------------------------------------------------------------


def client_ip(request: HttpRequest) -> str | None:
    # REMOTE_ADDR only: X-Forwarded-For is whatever the client wants it to be unless a trusted proxy set it.
    return request.META.get("REMOTE_ADDR") or None


def _set_request(entry: AuditEntry, request: HttpRequest) -> None:
    entry.ip = client_ip(request)
    entry.user_agent = request.headers.get("User-Agent", "")[:300]
    entry.path = request.path[:500]
    entry.method = (request.method or "")[:10]


def _action_name(request: HttpRequest, primary: Change | None) -> str:
    match = getattr(request, "resolver_match", None)
    drf_actions = getattr(getattr(match, "func", None), "actions", None)
    if isinstance(drf_actions, dict):  # a DRF viewset: its custom action names the act best ("cancel", "rerun")
        name = drf_actions.get((request.method or "").lower())
        if name and name not in CRUD_ACTIONS:
            return name
    if primary is not None:
        if primary.label == "accounts.apitoken" and "revoked_at" in primary.changes:
            return "revoke"
        return primary.kind
    if match is not None and match.url_name == "mlflow":
        return match.kwargs.get("endpoint", "").rstrip("/").rsplit("/", 1)[-1][:50] or "call"
    return METHOD_ACTIONS.get(request.method or "", "call")


def _project_of(change: Change) -> int | None:
    try:
        return resolve_project_id(change.instance) if change.instance is not None else None
    except Exception:  # an object deleted later in the same request: its relations may be gone
        logger.debug("no project for %s %s", change.label, change.pk, exc_info=True)
        return None


def _project_by_id(project_id: int | None) -> Any:
    return Project.objects.filter(pk=project_id).first() if project_id is not None else None


def _project_from_url(request: HttpRequest) -> Any:
    """The project of a page URL (`/p/<project>/…`) or of a DRF body naming one by slug."""
    match = getattr(request, "resolver_match", None)
    slug = match.kwargs.get("project") if match is not None else None
    return Project.objects.filter(slug=slug).first() if isinstance(slug, str) else None


def _set_project(entry: AuditEntry, project: Any) -> None:
    if project is not None:
        entry.project, entry.project_repr = project, project.slug[:100]


def _set_object_from_url(entry: AuditEntry, request: HttpRequest) -> int | None:
    """No model change was seen (a bulk update, a file write, metric points): name the object the URL (or the
    MLflow body) points at; returns its project's id when that is known."""
    match = getattr(request, "resolver_match", None)
    if match is None:
        try:
            match = resolve(request.path_info)
        except Resolver404:
            return None
    func = match.func
    model = None
    view_class = getattr(func, "cls", None)
    if view_class is not None:
        queryset = getattr(view_class, "queryset", None)
        model = queryset.model if queryset is not None else None
    model = model or getattr(func, "portal_model", None)
    kwargs = {k: v for k, v in match.kwargs.items() if k != "project"}
    if model is not None:
        entry.object_type = label_of(model)
    if match.url_name == "mlflow":
        entry.object_type = "mlflow." + kwargs.get("endpoint", "").split("/", 1)[0]
        body = _json_body(request)
        key = next((k for k in MLFLOW_OBJECT_KEYS if body.get(k)), None)
        if key:
            entry.object_id = str(body[key])[:64]
        if key in ("run_id", "run_uuid"):
            return _mlflow_run(entry, str(body[key]))
        return None
    ident = next((str(v) for v in kwargs.values() if isinstance(v, str | int)), "")
    entry.object_id = ident[:64]
    entry.object_repr = ident[:200] if "path" not in kwargs else str(kwargs["path"])[:200]
    return None


def _mlflow_run(entry: AuditEntry, run_uuid: str) -> int | None:
    """Metric points are not recorded one by one: the entry names their run (and so its project)."""
    run = Run.objects.filter(run_uuid=run_uuid).select_related("experiment").first()
    if run is None:
        return None
    entry.object_type, entry.object_repr = label_of(Run), str(run)[:200]
    return run.experiment.project_id


def _json_body(request: HttpRequest) -> dict:
    try:
        data = json.loads(request.body or b"{}")
    except Exception:  # unread stream, not JSON: the URL is all there is
        return {}
    return data if isinstance(data, dict) else {}
