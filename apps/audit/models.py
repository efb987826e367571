"""The audit log's one model: an append-only record of a mutating action."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from apps.projects.permissions import CHANGE, projects_for


class AuditEntryQuerySet(models.QuerySet["AuditEntry"]):
    def for_user(self, user: Any, token: Any = None) -> AuditEntryQuerySet:
        """Staff read every entry; others the entries of projects they administer (admin role and up).

        A project token narrows either to its project, so a limited token never reads further than its project.
        """
        if not getattr(user, "is_authenticated", False) or not user.is_active:
            return self.none()
        qs = self if user.is_staff or user.is_superuser else self.filter(project__in=projects_for(user, CHANGE))
        if token is not None and getattr(token, "project_id", None) is not None:
            qs = qs.filter(project_id=token.project_id)
        return qs


class AuditEntry(models.Model):
    """Who did what to which object, from where, and which fields changed ({"field": [old, new]}, secrets masked).

    Append-only: `save()` refuses to change a stored entry and `delete()` refuses outright; the admin and the
    API are read-only. Users, tokens and projects may go away: their foreign keys become null and the
    `*_repr` copies keep the entry readable.
    """

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    actor_repr = models.CharField(_("actor"), max_length=150, blank=True)
    token = models.ForeignKey("accounts.ApiToken", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    action = models.CharField(_("action"), max_length=50, db_index=True)
    object_type = models.CharField(_("object type"), max_length=100, blank=True, db_index=True)
    object_id = models.CharField(_("object id"), max_length=64, blank=True)
    object_repr = models.CharField(_("object"), max_length=200, blank=True)
    project = models.ForeignKey("projects.Project", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    project_repr = models.CharField(_("project"), max_length=100, blank=True)
    changes = models.JSONField(_("changes"), default=dict, blank=True)
    ip = models.GenericIPAddressField(_("IP address"), null=True, blank=True)
    user_agent = models.CharField(_("user agent"), max_length=300, blank=True)
    path = models.CharField(_("path"), max_length=500, blank=True)
    method = models.CharField(_("method"), max_length=10, blank=True)
    status = models.PositiveSmallIntegerField(_("status"), null=True, blank=True)
    created_at = models.DateTimeField(_("time"), default=timezone.now, db_index=True)

    objects = AuditEntryQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["project", "-created_at"])]
        verbose_name = _("audit entry")
        verbose_name_plural = _("audit entries")

    def __str__(self) -> str:
        return f"{self.actor_repr or '-'} {self.action} {self.object_type} {self.object_repr}".strip()

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise ValueError("Audit entries are append-only.")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> Any:
        raise ValueError("Audit entries are append-only.")
