"""What changed during a request: model signals collected into the request's `Collector` (a contextvar).

The middleware (apps/audit/middleware.py) opens a collector per request; the receivers here add one `Change`
per object created, changed or deleted, with the previous values read in `pre_save` so that an update records
only the fields that really changed. Outside a request (Celery tasks, the agent, management commands) no
collector is open and the receivers return at once.

The collector is a mutable object held by the contextvar, not a value re-set by the receivers: under ASGI the
view runs in a `sync_to_async` thread with a *copy* of the context, and only a shared object carries what that
thread collected back to the middleware.
"""

from __future__ import annotations

import contextvars
import datetime
import decimal
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.signals import user_logged_in, user_logged_out
from django.db import models
from django.db.models.signals import m2m_changed, post_save, pre_delete, pre_save

from apps.projects.models import Project
from portal.lib.fields import EncryptedText

# Models whose rows are bookkeeping, not actions: sessions, admin's own log, permission rows (granted by the
# membership service, which is recorded), log lines, metric points, runtime state, the audit log itself.
NOISE_MODELS = frozenset(
    {
        "sessions.session",
        "admin.logentry",
        "contenttypes.contenttype",
        "auth.permission",
        "guardian.userobjectpermission",
        "guardian.groupobjectpermission",
        "projects.projectuserobjectpermission",
        "projects.projectgroupobjectpermission",
        "accounts.notification",
        "accounts.ssomembership",
        "jobs.logline",
        "jobs.resourcesample",
        "models.metric",
        "models.latestmetric",
        "runtime.agent",
        "runtime.localworkload",
        "runtime.dispatchlock",
        "runtime.kubeworkload",
        "datasets.blob",
        "audit.auditentry",
    }
)
NOISE_APPS = frozenset({"channels_lite", "django_celery_beat", "django_celery_results", "axes"})
# Fields that change as a side effect of use, never as an action: an update touching only these is not one.
NOISE_FIELDS = frozenset({"last_login", "last_used_at", "updated_at", "modified_at"})
SENSITIVE = re.compile(r"(^|_)(password|passwd|secret|token|digest|api_key|private_key|kubeconfig|credentials?)($|_)")
MASK = "***"
MAX_VALUE_CHARS = 200


@dataclass
class Change:
    """One object created, updated or deleted during the request (an object saved twice is one Change)."""

    kind: str  # "create" | "update" | "delete"
    label: str  # "app_label.modelname"
    pk: str
    repr: str
    changes: dict[str, list[Any]] = field(default_factory=dict)
    instance: models.Model | None = None
    root: bool = True  # a delete is a root unless it cascaded from another object's delete
    project_id: int | None = None  # resolved at pre_delete time for roots (the object is gone afterwards)


@dataclass
class Collector:
    """Everything one request changed, in order, plus explicit events (login, logout)."""

    changes: list[Change] = field(default_factory=list)
    event: str | None = None
    event_user: Any = None
    previous: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    def find(self, label: str, pk: str) -> Change | None:
        return next((c for c in self.changes if c.label == label and c.pk == pk), None)

    def interesting(self) -> list[Change]:
        return [c for c in self.changes if c.kind != "delete" or c.root]


current: contextvars.ContextVar[Collector | None] = contextvars.ContextVar("audit_collector", default=None)


def label_of(model: type[models.Model]) -> str:
    return model._meta.label_lower


def is_noise(model: type[models.Model]) -> bool:
    from guardian.models.models import BaseObjectPermission

    meta = model._meta
    return (
        meta.label_lower in NOISE_MODELS
        or meta.app_label in NOISE_APPS
        or meta.auto_created is not False
        or issubclass(model, BaseObjectPermission)
    )


def is_sensitive(model_field: models.Field) -> bool:
    return isinstance(model_field, EncryptedText) or bool(SENSITIVE.search(model_field.name.lower()))


def plain(value: Any) -> Any:
    """A JSON-safe, bounded copy of a field value."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    text = value if isinstance(value, str) else repr(value) if not isinstance(value, dict | list) else None
    if text is None:  # JSON data: keep its shape when small
        import json

        text = json.dumps(value, default=str, sort_keys=True)
        return value if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 1] + "…"
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 1] + "…"


def tracked_fields(model: type[models.Model]) -> list[models.Field]:
    return [f for f in model._meta.concrete_fields if not f.primary_key]


def values_of(instance: models.Model, fields: list[models.Field]) -> dict[str, Any]:
    return {f.name: getattr(instance, f.attname) for f in fields}


def summarize(model: type[models.Model], old: dict[str, Any], new: dict[str, Any]) -> dict[str, list[Any]]:
    """{"field": [old, new]} for each field whose value differs; sensitive fields as ["***", "***"]."""
    by_name = {f.name: f for f in tracked_fields(model)}
    summary: dict[str, list[Any]] = {}
    for name, value in new.items():
        before = old.get(name)
        if before == value or name not in by_name:
            continue
        if is_sensitive(by_name[name]):
            summary[name] = [MASK if before not in (None, "") else None, MASK if value not in (None, "") else None]
        else:
            summary[name] = [plain(before), plain(value)]
    return summary


def resolve_project_id(instance: models.Model) -> int | None:
    """The project an object belongs to (following its `tenant_path`), or None."""
    if isinstance(instance, Project):
        return instance.pk
    path = getattr(type(instance), "tenant_path", None)
    if path is None:
        project_id = getattr(instance, "project_id", None)
        return project_id if isinstance(project_id, int) else None
    obj: Any = instance
    parts = path.split("__")
    try:
        for part in parts[:-1]:
            obj = getattr(obj, part)
        return getattr(obj, f"{parts[-1]}_id", None) if parts[-1] != "pk" else obj.pk
    except models.ObjectDoesNotExist:
        return None


# --- receivers ----------------------------------------------------------------------------------


def on_pre_save(sender: type[models.Model], instance: models.Model, raw: bool = False, **kwargs: Any) -> None:
    collector = current.get()
    if collector is None or raw or is_noise(sender) or instance._state.adding or instance.pk is None:
        return
    fields = tracked_fields(sender)
    update_fields = kwargs.get("update_fields")
    if update_fields:
        fields = [f for f in fields if f.name in update_fields or f.attname in update_fields]
    row = sender._base_manager.using(kwargs.get("using")).filter(pk=instance.pk).values(*(f.attname for f in fields))
    stored = row.first()
    if stored is not None:
        by_attname = {f.attname: f.name for f in fields}
        collector.previous[(label_of(sender), str(instance.pk))] = {by_attname[k]: v for k, v in stored.items()}


def on_post_save(
    sender: type[models.Model], instance: models.Model, created: bool, raw: bool = False, **kwargs: Any
) -> None:
    collector = current.get()
    if collector is None or raw or is_noise(sender):
        return
    label, pk = label_of(sender), str(instance.pk)
    fields = tracked_fields(sender)
    update_fields = kwargs.get("update_fields")
    if update_fields:
        fields = [f for f in fields if f.name in update_fields or f.attname in update_fields]
    new = values_of(instance, fields)
    old = {} if created else collector.previous.pop((label, pk), {})
    summary = summarize(sender, old, new)
    existing = collector.find(label, pk)
    if existing is not None:  # saved again in the same request: merge into the first record
        for name, (before, after) in summary.items():
            existing.changes[name] = [existing.changes.get(name, [before])[0], after]
        existing.repr = str(instance)[:200]
        return
    if not created and (not summary or set(summary) <= NOISE_FIELDS):
        return  # saved without a real change (or only bookkeeping fields)
    collector.changes.append(
        Change("create" if created else "update", label, pk, str(instance)[:200], summary, instance)
    )


def on_pre_delete(sender: type[models.Model], instance: models.Model, origin: Any = None, **kwargs: Any) -> None:
    collector = current.get()
    if collector is None or is_noise(sender):
        return
    # `origin` is the object (or queryset) delete() was called on: everything else was cascaded from it.
    if isinstance(origin, models.Model):
        root = origin is instance or (type(origin) is sender and origin.pk == instance.pk)
    else:
        root = isinstance(origin, models.QuerySet) and origin.model is sender
    label, pk = label_of(sender), str(instance.pk)
    existing = collector.find(label, pk)
    project_id = resolve_project_id(instance) if root else None
    if existing is not None:
        if existing.kind == "create":  # created and deleted in one request: nothing remains
            collector.changes.remove(existing)
            return
        existing.kind, existing.root, existing.project_id = "delete", root, project_id
        return
    collector.changes.append(Change("delete", label, pk, str(instance)[:200], {}, instance, root, project_id))


def on_m2m_changed(sender: Any, instance: models.Model, action: str, model: Any, pk_set: Any, **kwargs: Any) -> None:
    collector = current.get()
    if collector is None or action not in ("post_add", "post_remove", "post_clear") or is_noise(type(instance)):
        return
    name = next(
        (f.name for f in type(instance)._meta.many_to_many if f.remote_field.through is sender),
        sender._meta.model_name,
    )
    pks = sorted(str(pk) for pk in (pk_set or ()))
    summary = {name: [[], pks] if action == "post_add" else [pks or ["*"], []]}
    label, pk = label_of(type(instance)), str(instance.pk)
    existing = collector.find(label, pk)
    if existing is not None:
        existing.changes.update(summary)
    else:
        collector.changes.append(Change("update", label, pk, str(instance)[:200], summary, instance))


def on_logged_in(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    collector = current.get()
    if collector is not None:
        collector.event, collector.event_user = "login", user


def on_logged_out(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    collector = current.get()
    if collector is not None:
        collector.event, collector.event_user = "logout", user


def connect() -> None:
    pre_save.connect(on_pre_save, dispatch_uid="audit.pre_save")
    post_save.connect(on_post_save, dispatch_uid="audit.post_save")
    pre_delete.connect(on_pre_delete, dispatch_uid="audit.pre_delete")
    m2m_changed.connect(on_m2m_changed, dispatch_uid="audit.m2m_changed")
    user_logged_in.connect(on_logged_in, dispatch_uid="audit.logged_in")
    user_logged_out.connect(on_logged_out, dispatch_uid="audit.logged_out")
    # No post_delete: pre_delete sees the object while its relations (and so its project) still exist.
