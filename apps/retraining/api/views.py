from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from apps.projects.api.base import ProjectScopedGenericViewSet, ProjectScopedViewSet
from apps.projects.permissions import CHANGE, CONTRIBUTE, VIEW
from apps.retraining import gate, services
from apps.retraining.api.serializers import (
    DataCheckSerializer,
    DataMonitorSerializer,
    PromotionDecisionSerializer,
    RetrainingSerializer,
    RetrainPolicySerializer,
)
from apps.retraining.filters import (
    DataCheckFilterSet,
    DataMonitorFilterSet,
    PromotionDecisionFilterSet,
    RetrainingFilterSet,
    RetrainPolicyFilterSet,
)
from apps.retraining.models import DataCheck, DataMonitor, PromotionDecision, Retraining, RetrainPolicy

WRITABLE = ["get", "post", "patch", "delete", "head", "options"]


class RetrainPolicyViewSet(ProjectScopedViewSet):
    """Retrain policies: members read them, editors create, change, delete and `trigger` them (a retraining run of
    the dataset's newest version, started as the policy's owner)."""

    queryset = RetrainPolicy.objects.select_related(
        "project", "pipeline", "dataset", "registered_model", "drift_monitor", "created_by"
    )
    serializer_class = RetrainPolicySerializer
    filterset_class = RetrainPolicyFilterSet
    search_fields = ["name"]
    ordering_fields = ["name", "created_at"]
    http_method_names = WRITABLE
    action_perms = {"trigger": CONTRIBUTE}

    def perform_create(self, serializer: RetrainPolicySerializer) -> None:
        data = dict(serializer.validated_data)
        project = data.pop("project")
        self.check_project(project)
        serializer.instance = services.create_policy(project, self.request.user, **data)

    def perform_update(self, serializer: RetrainPolicySerializer) -> None:
        serializer.instance = services.update_policy(serializer.instance, **serializer.validated_data)

    def perform_destroy(self, instance: RetrainPolicy) -> None:
        services.delete_policy(instance)

    @extend_schema(request=None, responses={201: RetrainingSerializer})
    @action(detail=True, methods=["post"])
    def trigger(self, request: Request, pk: str | None = None) -> Response:
        """Retrain now with the dataset's newest version (no cooldown); answers the retraining."""
        retraining = services.start_policy(self.get_object(), "manual", detail=f"by {request.user}")
        return Response(RetrainingSerializer(retraining).data, status=201)


class DataMonitorViewSet(ProjectScopedViewSet):
    """Data monitors: members read them, editors create, change and delete them."""

    queryset = DataMonitor.objects.select_related("project", "dataset", "policy", "created_by")
    serializer_class = DataMonitorSerializer
    filterset_class = DataMonitorFilterSet
    search_fields = ["name"]
    ordering_fields = ["name", "created_at"]
    http_method_names = WRITABLE

    def perform_create(self, serializer: DataMonitorSerializer) -> None:
        data = dict(serializer.validated_data)
        project = data.pop("project")
        self.check_project(project)
        serializer.instance = services.create_monitor(project, self.request.user, **data)

    def perform_update(self, serializer: DataMonitorSerializer) -> None:
        serializer.instance = services.update_monitor(serializer.instance, **serializer.validated_data)

    def perform_destroy(self, instance: DataMonitor) -> None:
        services.delete_monitor(instance)


class DataCheckViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ProjectScopedGenericViewSet):
    """Data checks: a version compared with the previous one (read-only records)."""

    queryset = DataCheck.objects.select_related("monitor__project", "version__dataset", "previous__dataset")
    serializer_class = DataCheckSerializer
    filterset_class = DataCheckFilterSet
    ordering_fields = ["created_at", "score"]
    action_perms = {"list": VIEW, "retrieve": VIEW}


class RetrainingViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ProjectScopedGenericViewSet):
    """Retrainings: each start of a policy and its run (read-only records)."""

    queryset = Retraining.objects.select_related("project", "policy", "dataset_version__dataset", "run")
    serializer_class = RetrainingSerializer
    filterset_class = RetrainingFilterSet
    ordering_fields = ["created_at"]
    action_perms = {"list": VIEW, "retrieve": VIEW}


class PromotionDecisionViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ProjectScopedGenericViewSet):
    """The gate's decisions with both metrics. Project admins `approve` or `reject` a pending one; editors
    `rollback` a promotion (the alias goes back to the version it replaced, its services follow)."""

    queryset = PromotionDecision.objects.select_related(
        "project", "registered_model", "challenger", "champion", "previous", "decided_by", "rolled_back_by"
    )
    serializer_class = PromotionDecisionSerializer
    filterset_class = PromotionDecisionFilterSet
    ordering_fields = ["created_at"]
    action_perms = {"list": VIEW, "retrieve": VIEW, "approve": CHANGE, "reject": CHANGE, "rollback": CONTRIBUTE}

    def _act(self, act) -> Response:
        decision = act(self.get_object(), self.request.user)
        return Response(PromotionDecisionSerializer(decision).data)

    @extend_schema(request=None, responses={200: PromotionDecisionSerializer})
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str | None = None) -> Response:
        """Promote a pending challenger (project admins)."""
        return self._act(gate.approve)

    @extend_schema(request=None, responses={200: PromotionDecisionSerializer})
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str | None = None) -> Response:
        """Turn a pending challenger down (project admins); the alias stays."""
        return self._act(gate.reject)

    @extend_schema(request=None, responses={200: PromotionDecisionSerializer})
    @action(detail=True, methods=["post"])
    def rollback(self, request: Request, pk: str | None = None) -> Response:
        """Move the alias back to the version this promotion replaced."""
        return self._act(gate.roll_back)
