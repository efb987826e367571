"""The API's permission choke point: every project-owned endpoint subclasses `ProjectScopedViewSet`.

- The queryset is `Model.objects.for_user(user, token=...)`, so other tenants' rows are 404.
- `ProjectPermission` maps each action to a project permission (guardian): visible but not
  allowed is 403. Read-only tokens cannot write; project tokens see one project only.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

from django.db.models import Model, QuerySet
from django.utils.translation import gettext as _
from rest_framework import mixins, permissions, viewsets
from rest_framework.request import Request

from apps.projects.models import Project
from apps.projects.permissions import CONTRIBUTE, VIEW, has_project_perm, projects_for

DEFAULT_ACTION_PERMS: dict[str, str] = {
    "list": VIEW,
    "retrieve": VIEW,
    "create": CONTRIBUTE,
    "update": CONTRIBUTE,
    "partial_update": CONTRIBUTE,
    "destroy": CONTRIBUTE,
}


class ProjectToken(Protocol):
    """What the API asks of the token a request authenticated with (`apps.accounts.models.ApiToken`; the accounts
    app sits above this one): the one project it is limited to, if any, and whether it may only read."""

    project_id: int | None
    read_only: bool


def request_token(request: Request) -> ProjectToken | None:
    """The request's API token, or None for a session. The only authentication that sets `request.auth` is the
    token one (settings' DEFAULT_AUTHENTICATION_CLASSES: ApiTokenAuthentication, SessionAuthentication)."""
    return request.auth


class TokenScopePermission(permissions.BasePermission):
    """A read-scoped token may only use safe methods. Applies to every endpoint."""

    message = _("This token is read-only.")

    def has_permission(self, request: Request, view: Any) -> bool:
        token = request_token(request)
        return token is None or not token.read_only or request.method in permissions.SAFE_METHODS


class ProjectPermission(permissions.BasePermission):
    """The project permission the current action needs, checked on the object's project."""

    def has_permission(self, request: Request, view: Any) -> bool:
        return bool(request.user and request.user.is_authenticated)

    def has_object_permission(self, request: Request, view: Any, obj: Model) -> bool:
        perm = view.required_perm()
        if has_project_perm(request.user, obj.project, perm):
            return True
        self.message = _("Your role in this project does not allow this (%(perm)s).") % {"perm": perm}
        return False


class ProjectScopedGenericViewSet(viewsets.GenericViewSet):
    """Base of every viewset for models that belong to a project (directly or through their parent).

    Combine with DRF's mixins for a subset of actions; `ProjectScopedViewSet` has them all. Its `filterset_class`
    derives from `apps.projects.filters.ProjectScopedFilterSet`, which gives every list `?project=<slug>`.
    """

    permission_classes = [permissions.IsAuthenticated, TokenScopePermission, ProjectPermission]
    action_perms: ClassVar[dict[str, str]] = {}

    def required_perm(self) -> str:
        return {**DEFAULT_ACTION_PERMS, **self.action_perms}.get(self.action or "", CONTRIBUTE)

    def get_queryset(self) -> QuerySet:
        return self.queryset.for_user(self.request.user, token=request_token(self.request))

    def precheck_project(self) -> None:
        """Answer "not allowed" before "invalid" for a body naming a visible project: a viewer learns
        nothing from field errors. Call first in any action that creates inside a project."""
        data = self.request.data
        slug = data.get("project") if hasattr(data, "get") else None
        if isinstance(slug, str):
            project = projects_for(self.request.user).filter(slug=slug).first()
            if project is not None:
                self.check_project(project)

    def check_project(self, project: Project, perm: str | None = None) -> None:
        """For creates: the target project must be visible (else 404) and allow the action (else 403)."""
        token = request_token(self.request)
        if token is not None and token.project_id not in (None, project.pk):
            self.permission_denied(self.request, message=_("This token is limited to another project."))
        perm = perm or self.required_perm()
        if not has_project_perm(self.request.user, project, perm):
            self.permission_denied(
                self.request, message=_("Your role in this project does not allow this (%(perm)s).") % {"perm": perm}
            )


class ProjectScopedViewSet(
    mixins.CreateModelMixin,
    mixins.RetrieveModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    mixins.ListModelMixin,
    ProjectScopedGenericViewSet,
):
    """A project-scoped viewset with every CRUD action."""

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        self.precheck_project()
        return super().create(request, *args, **kwargs)
