"""What the route-walking permission tests need to know about each model: how to make one in a project.

A new model behind an API endpoint or a project page must get a maker here, or
tests/projects/test_access_matrix.py fails and says so: every endpoint is covered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from apps.accounts.models import ApiToken, Notification
from apps.accounts.services import create_token, notify
from apps.projects.models import Membership, Project, Quota, Role
from tests.factories import UserFactory, add_member

# model -> make(project, owner) -> an instance belonging to `project`
PROJECT_OBJECT_MAKERS: dict[type, Callable[[Project, Any], Any]] = {
    Project: lambda project, owner: project,
    Membership: lambda project, owner: add_member(
        project, UserFactory(username=f"member-of-{project.slug}"), Role.VIEWER
    ),
    Quota: lambda project, owner: project.quota,
}

# model -> make(user) -> an instance that belongs to `user` only (personal objects)
USER_OBJECT_MAKERS: dict[type, Callable[[Any], Any]] = {
    ApiToken: lambda user: create_token(user, name="someone's")[0],
    Notification: lambda user: notify(user, "hello"),
}


def lookup_value(obj: Any, viewset: Any) -> str:
    field = getattr(viewset, "lookup_field", "pk")
    return str(getattr(obj, field))
