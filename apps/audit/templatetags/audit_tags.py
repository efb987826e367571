"""`{{ project|can_read_audit:user }}`: whether the project's nav shows the audit log tab (admins and up)."""

from __future__ import annotations

from typing import Any

from django import template

from apps.projects.permissions import CHANGE, has_project_perm

register = template.Library()


@register.filter
def can_read_audit(project: Any, user: Any) -> bool:
    return project is not None and has_project_perm(user, project, CHANGE)
