from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from apps.projects import secrets, services
from apps.projects.api.base import ProjectScopedViewSet, request_token
from apps.projects.api.serializers import (
    MembershipSerializer,
    MembershipUpdateSerializer,
    ProjectSecretSerializer,
    ProjectSerializer,
    TransferSerializer,
)
from apps.projects.filters import MembershipFilterSet, ProjectFilterSet, ProjectSecretFilterSet
from apps.projects.models import Membership, Project, ProjectSecret
from apps.projects.permissions import CHANGE, DELETE, MANAGE_MEMBERS, TRANSFER, VIEW


class ProjectViewSet(ProjectScopedViewSet):
    """Projects you are a member of. Anyone may create one and becomes its owner."""

    queryset = Project.objects.select_related("quota", "created_by")
    serializer_class = ProjectSerializer
    lookup_field = "slug"
    filterset_class = ProjectFilterSet
    search_fields = ["name", "slug", "description"]
    ordering_fields = ["name", "created_at"]
    action_perms = {
        "update": CHANGE,
        "partial_update": CHANGE,
        "destroy": DELETE,
        "transfer": TRANSFER,
        "leave": VIEW,
    }

    def my_roles(self) -> dict[int, int]:
        return dict(Membership.objects.filter(user=self.request.user).values_list("project_id", "role"))

    def get_serializer_context(self) -> dict[str, Any]:
        context = super().get_serializer_context()
        if self.request.user.is_authenticated:
            context["my_roles"] = self.my_roles()
        return context

    def perform_create(self, serializer: ProjectSerializer) -> None:
        token = request_token(self.request)
        if token is not None and token.project_id is not None:
            self.permission_denied(self.request, message=_("A project token cannot create projects."))
        data = serializer.validated_data
        serializer.instance = services.create_project(
            self.request.user,
            slug=data["slug"],
            name=data["name"],
            description=data.get("description", ""),
            runtime=data.get("runtime", ""),
            notebook_idle_timeout=data.get("notebook_idle_timeout"),
        )
        # The context was built before the project existed: without this the response says my_role null.
        serializer.context["my_roles"] = self.my_roles()

    def perform_update(self, serializer: ProjectSerializer) -> None:
        data = serializer.validated_data
        serializer.instance = services.update_project(
            serializer.instance,
            name=data.get("name"),
            description=data.get("description"),
            runtime=data.get("runtime"),
            notebook_idle_timeout=data.get("notebook_idle_timeout", services.UNCHANGED),
        )

    def perform_destroy(self, instance: Project) -> None:
        services.delete_project(instance)

    @extend_schema(request=TransferSerializer, responses=MembershipSerializer)
    @action(detail=True, methods=["post"])
    def transfer(self, request: Request, slug: str | None = None) -> Response:
        """Make another member an owner; you stay on as an admin."""
        project = self.get_object()
        body = TransferSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        membership = services.transfer_ownership(project, request.user, body.validated_data["user"])
        return Response(MembershipSerializer(membership, context=self.get_serializer_context()).data)

    @extend_schema(request=None, responses={204: None})
    @action(detail=True, methods=["post"])
    def leave(self, request: Request, slug: str | None = None) -> Response:
        """Leave the project (the last owner must transfer ownership first)."""
        services.leave_project(self.get_object(), request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class MembershipViewSet(ProjectScopedViewSet):
    """Members of your projects. Admins invite, change roles and remove; only owners touch owners."""

    queryset = Membership.objects.select_related("user", "project")
    serializer_class = MembershipSerializer
    filterset_class = MembershipFilterSet
    ordering_fields = ["role", "created_at"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]
    action_perms = {"create": MANAGE_MEMBERS, "partial_update": MANAGE_MEMBERS, "destroy": MANAGE_MEMBERS}

    def get_serializer_class(self) -> type:
        return MembershipUpdateSerializer if self.action == "partial_update" else MembershipSerializer

    def perform_create(self, serializer: MembershipSerializer) -> None:
        data = serializer.validated_data
        self.check_project(data["project"])
        serializer.instance = services.invite_member(
            data["project"], self.request.user, data["user"]["username"], data["role"]
        )

    def perform_update(self, serializer: MembershipUpdateSerializer) -> None:
        role = serializer.validated_data.get("role")
        if role is None:  # a PATCH without a role changes nothing (the role is the only writable field)
            return
        serializer.instance = services.change_role(serializer.instance, self.request.user, role)

    def perform_destroy(self, instance: Membership) -> None:
        services.remove_member(instance, self.request.user)

    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = self.get_serializer(self.get_object(), data=request.data, partial=kwargs.pop("partial", False))
        serializer.is_valid(raise_exception=True)
        self.perform_update(serializer)
        # Answer with the membership the service returned: fetching it again with get_object() would re-check
        # manage_members, which an admin who just stepped down to editor no longer has (403 after the change).
        return Response(MembershipSerializer(serializer.instance, context=self.get_serializer_context()).data)

    def check_object_permissions(self, request: Request, obj: Membership) -> None:
        if self.action == "destroy" and obj.user_id == request.user.pk:
            return  # removing yourself is leaving: any member may (the service guards the last owner)
        super().check_object_permissions(request, obj)


class ProjectSecretViewSet(ProjectScopedViewSet):
    """Secrets of your projects, by name and description: values are write-only and never returned. Editors and
    up create, replace and delete them; viewers see the names."""

    queryset = ProjectSecret.objects.select_related("project", "created_by")
    serializer_class = ProjectSecretSerializer
    filterset_class = ProjectSecretFilterSet
    ordering_fields = ["name", "updated_at"]
    http_method_names = ["get", "post", "patch", "put", "delete", "head", "options"]

    def perform_create(self, serializer: ProjectSecretSerializer) -> None:
        data = serializer.validated_data
        self.check_project(data["project"])
        serializer.instance = secrets.create_secret(
            data["project"],
            self.request.user,
            name=data["name"],
            value=data["value"],
            description=data.get("description", ""),
        )

    def perform_update(self, serializer: ProjectSecretSerializer) -> None:
        data = serializer.validated_data
        serializer.instance = secrets.update_secret(
            serializer.instance, value=data.get("value"), description=data.get("description")
        )

    def perform_destroy(self, instance: ProjectSecret) -> None:
        secrets.delete_secret(instance)
