"""Roles → django-guardian object permissions: the only place that grants or revokes them.

Every check elsewhere asks guardian (`user.has_perm("projects.<perm>", project)`) or filters with
`projects_for()`; nothing compares roles ad hoc.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.db.models import QuerySet
from guardian.shortcuts import get_objects_for_user

from apps.projects.models import Project, ProjectUserObjectPermission, Role

VIEW = "view_project"
CONTRIBUTE = "contribute_project"
CHANGE = "change_project"
MANAGE_MEMBERS = "manage_members"
DELETE = "delete_project"
TRANSFER = "transfer_project"

ROLE_PERMISSIONS: dict[int, frozenset[str]] = {
    Role.VIEWER: frozenset({VIEW}),
    Role.EDITOR: frozenset({VIEW, CONTRIBUTE}),
    Role.ADMIN: frozenset({VIEW, CONTRIBUTE, CHANGE, MANAGE_MEMBERS}),
    Role.OWNER: frozenset({VIEW, CONTRIBUTE, CHANGE, MANAGE_MEMBERS, DELETE, TRANSFER}),
}
ALL_PERMISSIONS = ROLE_PERMISSIONS[Role.OWNER]


def minimum_role(perm: str) -> Role:
    """The lowest role holding `perm` (used by tests and to explain a 403)."""
    return min((Role(r) for r, perms in ROLE_PERMISSIONS.items() if perm in perms), key=int)


def sync_member_permissions(project: Project, user: Any, role: int | None) -> None:
    """Make the user's guardian permissions on `project` exactly those of `role` (None: none at all).

    Call inside the transaction that changes the membership.
    """
    wanted = ROLE_PERMISSIONS[role] if role is not None else frozenset()
    rows = ProjectUserObjectPermission.objects.filter(user=user, content_object=project)
    existing = set(rows.values_list("permission__codename", flat=True))
    stale = (existing & ALL_PERMISSIONS) - wanted
    if stale:
        rows.filter(permission__codename__in=stale).delete()
    missing = wanted - existing
    if missing:
        content_type = ContentType.objects.get_for_model(Project)
        perms = Permission.objects.filter(content_type=content_type, codename__in=missing)
        ProjectUserObjectPermission.objects.bulk_create(
            ProjectUserObjectPermission(user=user, content_object=project, permission=p) for p in perms
        )


def projects_for(user: Any, perm: str = VIEW) -> QuerySet[Project]:
    """Projects in which `user` holds `perm` (superusers: all; anonymous or inactive: none)."""
    if not getattr(user, "is_authenticated", False) or not user.is_active:
        return Project.objects.none()
    return get_objects_for_user(user, f"projects.{perm}", klass=Project, accept_global_perms=False)


def has_project_perm(user: Any, project: Project, perm: str) -> bool:
    return bool(getattr(user, "is_authenticated", False)) and user.has_perm(f"projects.{perm}", project)
