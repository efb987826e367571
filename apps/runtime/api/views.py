"""The cluster registry's API: clusters and their project bindings.

Members of a bound project read a cluster (never its kubeconfig); staff read all and write. A cluster or
binding the requester cannot see is 404 for every method; one they see but may not change is 403.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.utils.translation import gettext as _
from rest_framework import mixins, permissions
from rest_framework.request import Request

from apps.projects.api.base import ProjectScopedGenericViewSet, TokenScopePermission, request_token
from apps.projects.permissions import VIEW
from apps.runtime import services
from apps.runtime.api.filters import ClusterFilterSet, ProjectClusterFilterSet
from apps.runtime.api.serializers import ClusterSerializer, ProjectClusterSerializer
from apps.runtime.models import Cluster, ProjectCluster

# What writes require, in the vocabulary of project permissions: no project role holds it, because clusters
# are the platform's. Only `services.is_platform_admin` (active staff, no project-limited token) passes.
PLATFORM_ADMIN = "platform_admin"


class PlatformWritePermission(permissions.BasePermission):
    """Reads for whoever sees the object; writes for platform admins only.

    Detail writes are decided on the object, after the queryset has answered 404 for what is not visible.
    """

    message = _("Only platform administrators change clusters and their bindings.")

    def _allowed(self, request: Request) -> bool:
        return request.method in permissions.SAFE_METHODS or services.is_platform_admin(
            request.user, request_token(request)
        )

    def has_permission(self, request: Request, view: Any) -> bool:
        return bool(getattr(view, "detail", False)) or self._allowed(request)

    def has_object_permission(self, request: Request, view: Any, obj: Any) -> bool:
        return self._allowed(request)


class PlatformViewSet(
    mixins.CreateModelMixin,
    mixins.RetrieveModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    mixins.ListModelMixin,
    ProjectScopedGenericViewSet,
):
    """Objects seen through project bindings and written by staff (a project-scoped viewset for the permission
    matrix: visibility follows the requester's projects)."""

    permission_classes = [permissions.IsAuthenticated, TokenScopePermission, PlatformWritePermission]

    def required_perm(self) -> str:
        return VIEW if self.action in ("list", "retrieve") else PLATFORM_ADMIN


class ClusterViewSet(PlatformViewSet):
    """Kubernetes clusters. Members see those bound to their projects; staff register and change them.

    `kubeconfig` is write-only and checked on save (YAML, the context, the server, no file references): a bad
    one is a 400 naming the field.
    """

    queryset = Cluster.objects.all()
    serializer_class = ClusterSerializer
    lookup_field = "name"
    lookup_value_regex = "[-a-zA-Z0-9_]+"
    filterset_class = ClusterFilterSet
    search_fields = ["name", "description"]
    ordering_fields = ["name", "created_at", "inventory_at"]

    def get_queryset(self) -> QuerySet:
        return services.visible_clusters(self.request.user, request_token(self.request)).order_by("name")

    def _save(self, serializer: ClusterSerializer, cluster: Cluster | None) -> None:
        data = dict(serializer.validated_data)
        kubeconfig = data.pop("kubeconfig", None)
        serializer.instance = services.save_cluster(cluster, kubeconfig=kubeconfig, **data)

    def perform_create(self, serializer: ClusterSerializer) -> None:
        self._save(serializer, None)

    def perform_update(self, serializer: ClusterSerializer) -> None:
        self._save(serializer, serializer.instance)

    def perform_destroy(self, instance: Cluster) -> None:
        services.delete_cluster(instance)


class ProjectClusterViewSet(PlatformViewSet):
    """Which projects run on which clusters, in which namespace. The default binding is tried first."""

    queryset = ProjectCluster.objects.all()
    serializer_class = ProjectClusterSerializer
    filterset_class = ProjectClusterFilterSet
    ordering_fields = ["cluster__name", "project__slug"]

    def get_queryset(self) -> QuerySet:
        bindings = services.visible_bindings(self.request.user, request_token(self.request))
        return bindings.order_by("project__slug", "cluster__name")

    def perform_create(self, serializer: ProjectClusterSerializer) -> None:
        data = serializer.validated_data
        serializer.instance = services.bind_project(
            data["project"],
            data["cluster"],
            namespace=data.get("namespace", ""),
            is_default=bool(data.get("is_default")),
        )

    def perform_update(self, serializer: ProjectClusterSerializer) -> None:
        binding = serializer.instance
        data = serializer.validated_data
        serializer.instance = services.bind_project(
            binding.project,
            binding.cluster,
            namespace=data.get("namespace", binding.namespace),
            is_default=data.get("is_default", binding.is_default),
        )

    def perform_destroy(self, instance: ProjectCluster) -> None:
        services.unbind_project(instance)
