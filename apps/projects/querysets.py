"""The one queryset helper every tenant-owned model uses: `Model.objects.for_user(user, perm)`."""

from __future__ import annotations

from typing import Any

from django.db import models


class TenantQuerySet(models.QuerySet):
    """Rows of the projects in which `user` holds `perm` (and, for a project token, of that project only).

    A model names the path from itself to its Project in `tenant_path` (default "project").
    """

    def in_project(self, project: Any) -> TenantQuerySet:
        """Rows that belong to `project` (pages resolve `<pk>` inside the project of the URL with this)."""
        path = getattr(self.model, "tenant_path", "project")
        return self.filter(pk=project.pk) if path == "pk" else self.filter(**{path: project})

    def for_user(self, user: Any, perm: str = "view_project", token: Any = None) -> TenantQuerySet:
        from apps.projects.permissions import projects_for

        path = getattr(self.model, "tenant_path", "project")
        key = "pk" if path == "pk" else f"{path}_id"
        qs = self.filter(**{f"{key}__in": projects_for(user, perm).values("pk")})
        if token is not None and token.project_id is not None:
            qs = qs.filter(**{key: token.project_id})
        return qs
