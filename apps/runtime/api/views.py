"""The cluster registry's API: clusters and their project bindings.

Members of a bound project read a cluster (never its kubeconfig); staff read all and write. A cluster or
binding the requester cannot see is 404 for every method; one they see but may not change is 403.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, permissions
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from apps.projects.api.base import ProjectScopedGenericViewSet, TokenScopePermission, request_token
from apps.projects.permissions import VIEW
from apps.runtime import services, usage
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

    def required_perm(self) -> str:
        return VIEW if self.action == "capacity" else super().required_perm()

    @extend_schema(responses={200: dict})
    @action(detail=False, methods=["get"], pagination_class=None, filter_backends=[])
    def capacity(self, request: Request) -> Response:
        """The capacity page's numbers: each live local agent's capacity, what its workloads asked for and what they
        use now (measured), and each visible cluster's requests against what its nodes can allocate. Holders are
        listed for the requester's projects (every project's for platform admins), the rest as totals."""
        return Response(capacity_json(usage.capacity(request.user)))


def _amounts(totals: usage.ResourceAmounts) -> dict[str, float]:
    return {"cpu": totals.cpu, "memory_bytes": int(totals.memory_bytes), "gpu": totals.gpu}


def _holder(holder: usage.Holder) -> dict[str, Any]:
    return {
        "kind": holder.kind,
        "what": holder.what,
        "project": holder.project_slug,
        "state": holder.state,
        "requested": _amounts(holder),
        "measured": holder.measured.to_json() if holder.measured is not None else None,
    }


def capacity_json(capacity: usage.Capacity) -> dict[str, Any]:
    machines = []
    for machine in capacity.machines:
        gpu_memory = sum(int(g.get("memory_bytes") or 0) for g in machine.gpus)
        machines.append(
            {
                "agent": machine.agent.pk,
                "hostname": machine.agent.hostname if capacity.show_all else None,
                "capacity": {**_amounts(usage.Totals(machine.capacity)), "gpu_memory_bytes": gpu_memory},
                "requested": _amounts(machine.used),
                "measured": machine.measured.to_json(),
                "holders": [_holder(h) for h in machine.holders],
            }
        )
    clusters = []
    for use in capacity.clusters:
        total = use.summary.total
        clusters.append(
            {
                "name": use.cluster.name,
                "requested": {
                    "cpu": total.cpu.requested,
                    "memory_bytes": total.memory.requested,
                    "gpu": total.gpu.requested,
                },
                "allocatable": {
                    "cpu": total.cpu.allocatable,
                    "memory_bytes": total.memory.allocatable,
                    "gpu": total.gpu.allocatable,
                },
                "portal_requested": _amounts(use.used),
                "holders": [_holder(h) for h in use.holders],
            }
        )
    return {"machines": machines, "clusters": clusters}


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
