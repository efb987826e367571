"""Our own API twins of tracking and the registry under /api/v1/ (project-scoped like every other API)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from apps.models import lttb, registry, search, services
from apps.models.api.serializers import (
    ExperimentSerializer,
    MetricSeriesSerializer,
    ModelAliasSerializer,
    ModelVersionSerializer,
    RegisteredModelSerializer,
    TrackingRunSerializer,
)
from apps.models.errors import TrackingError
from apps.models.filters import (
    ExperimentFilterSet,
    ModelAliasFilterSet,
    ModelVersionFilterSet,
    RegisteredModelFilterSet,
    TrackingRunFilterSet,
)
from apps.models.models import Experiment, ModelAlias, ModelVersion, RegisteredModel, Run
from apps.models.querysets import DELETED
from apps.projects.api.base import ProjectScopedGenericViewSet, ProjectScopedViewSet, request_token
from apps.projects.permissions import CONTRIBUTE, VIEW
from portal.lib.lttb import lttb as downsample


def domain(error: TrackingError, field: str = "non_field_errors") -> ValidationError:
    """Tracking errors as the API's field errors (400); not-found stays a 404 through the queryset."""
    return ValidationError({field: [error.message]})


class ExperimentViewSet(ProjectScopedViewSet):
    """Experiments of your projects. Deleting marks the experiment (and its runs) deleted, as MLflow does."""

    queryset = Experiment.objects.select_related("project")
    serializer_class = ExperimentSerializer
    filterset_class = ExperimentFilterSet
    ordering_fields = ["name", "creation_time", "last_update_time"]  # the FilterSet reads ?search=, ?ordering=
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def perform_create(self, serializer: ExperimentSerializer) -> None:
        data = serializer.validated_data
        self.check_project(data["project"])
        try:
            serializer.instance = services.create_experiment(data["project"], data["name"])
        except TrackingError as error:
            raise domain(error, "name") from None

    def perform_update(self, serializer: ExperimentSerializer) -> None:
        if "name" in serializer.validated_data:
            try:
                services.rename_experiment(serializer.instance, serializer.validated_data["name"])
            except TrackingError as error:
                raise domain(error, "name") from None

    def perform_destroy(self, instance: Experiment) -> None:
        services.set_experiment_lifecycle(instance, DELETED)


class TrackingRunViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ProjectScopedGenericViewSet):
    """Tracked runs. `?filter=` takes MLflow's search grammar (e.g. `metrics.acc > 0.9 AND params.lr = '0.1'`)."""

    queryset = Run.objects.select_related("project").prefetch_related("params", "tags", "latest_metrics")
    serializer_class = TrackingRunSerializer
    lookup_field = "run_uuid"
    filterset_class = TrackingRunFilterSet
    search_fields = ["name", "run_uuid"]
    ordering_fields = ["start_time", "end_time", "name"]
    action_perms = {"metric_series": VIEW}

    def get_queryset(self) -> QuerySet:
        qs = super().get_queryset()
        text = self.request.query_params.get("filter") if self.action == "list" else None
        if text:
            try:
                qs = search.filter_runs(qs, search.parse_filter(text))
            except TrackingError as error:
                raise domain(error, "filter") from None
        return qs

    @extend_schema(
        parameters=[
            OpenApiParameter("key", OpenApiTypes.STR, required=True, description="Metric key."),
            OpenApiParameter("points", OpenApiTypes.INT, description="At most this many points (LTTB), ≤ 10000."),
        ],
        responses={200: MetricSeriesSerializer},
    )
    @action(detail=True, methods=["get"], url_path="metric-series")
    def metric_series(self, request: Request, run_uuid: str | None = None) -> Response:
        """One metric downsampled with Largest-Triangle-Three-Buckets for charts (fast on 1M points)."""
        run = self.get_object()
        key = request.query_params.get("key", "")
        try:
            points = min(max(int(request.query_params.get("points", 500)), 3), lttb.MAX_POINTS)
        except ValueError:
            raise ValidationError({"points": [_("An integer is required.")]}) from None
        x, y = lttb.series(run.pk, key)
        sx, sy = downsample(x, y, points)
        return Response({"key": key, "total": len(x), "steps": sx.tolist(), "values": sy.tolist()})


class RegisteredModelViewSet(ProjectScopedViewSet):
    """Registered models of your projects."""

    queryset = RegisteredModel.objects.select_related("project")
    serializer_class = RegisteredModelSerializer
    filterset_class = RegisteredModelFilterSet
    ordering_fields = ["name", "creation_timestamp", "last_updated_timestamp"]  # as RegisteredModelFilterSet
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def perform_create(self, serializer: RegisteredModelSerializer) -> None:
        data = serializer.validated_data
        self.check_project(data["project"])
        try:
            serializer.instance = registry.create_registered_model(
                data["project"], data["name"], description=data.get("description", "")
            )
        except TrackingError as error:
            raise domain(error, "name") from None

    def perform_update(self, serializer: RegisteredModelSerializer) -> None:
        data = serializer.validated_data
        try:
            if "name" in data and data["name"] != serializer.instance.name:
                registry.rename_registered_model(serializer.instance, data["name"])
            if "description" in data:
                registry.update_registered_model(serializer.instance, data["description"])
        except TrackingError as error:
            raise domain(error, "name") from None

    def perform_destroy(self, instance: RegisteredModel) -> None:
        registry.delete_registered_model(instance)  # 409 naming the services that serve it


class ModelVersionViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.UpdateModelMixin, ProjectScopedGenericViewSet
):
    """Model versions: their source, run, status, stage, aliases; the description and model card are editable."""

    queryset = ModelVersion.objects.select_related("registered_model__project", "run").prefetch_related("aliases")
    serializer_class = ModelVersionSerializer
    filterset_class = ModelVersionFilterSet
    http_method_names = ["get", "patch", "head", "options"]

    def perform_update(self, serializer: ModelVersionSerializer) -> None:
        data = serializer.validated_data
        registry.update_model_version(
            serializer.instance, description=data.get("description"), model_card=data.get("model_card")
        )


class ModelAliasViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin, mixins.DestroyModelMixin,
    ProjectScopedGenericViewSet,
):  # fmt: skip
    """Aliases (`production`, `staging`, …): creating one for an alias that exists moves it to the new version."""

    queryset = ModelAlias.objects.select_related("registered_model__project", "model_version")
    serializer_class = ModelAliasSerializer
    filterset_class = ModelAliasFilterSet
    action_perms = {"create": CONTRIBUTE}

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        self.precheck_project()
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        model = data["registered_model"]
        if not RegisteredModel.objects.for_user(request.user, token=self._token()).filter(pk=model.pk).exists():
            raise ValidationError({"registered_model": [_("No such registered model.")]})
        self.check_project(model.project)
        if data["model_version"].registered_model_id != model.pk:
            raise ValidationError({"model_version": [_("This version belongs to another registered model.")]})
        try:
            alias = registry.set_alias(model, data["alias"], data["model_version"].version)
        except TrackingError as error:
            raise domain(error, "alias") from None
        return Response(self.get_serializer(alias).data, status=status.HTTP_201_CREATED)

    def _token(self) -> Any:
        return request_token(self.request)
