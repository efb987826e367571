"""`{{ project|can_read_audit:user }}`: whether the project's nav shows the audit log tab (admins and up).
`{{ value|change_value }}`: one side of a recorded change as people read it (JSON, not a Python repr)."""

from __future__ import annotations

import json
from typing import Any

from django import template

from apps.projects.permissions import CHANGE, has_project_perm

register = template.Library()


@register.filter
def can_read_audit(project: Any, user: Any) -> bool:
    return project is not None and has_project_perm(user, project, CHANGE)


@register.filter
def change_value(value: Any) -> str:
    """A string as it is, anything else (numbers, booleans, lists, mappings) as compact JSON; ∅ for none."""
    if value is None:
        return "∅"
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(", ", ": "), default=str)
