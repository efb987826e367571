from __future__ import annotations

from typing import Any

from django.db.models import Prefetch
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from apps.projects.api.base import ProjectScopedGenericViewSet, ProjectScopedViewSet
from apps.projects.permissions import CONTRIBUTE, VIEW
from apps.serving import console, explaining, payloads, services
from apps.serving.api.serializers import (
    ExplanationSerializer,
    GroundTruthSerializer,
    InferenceServiceSerializer,
    KeySerializer,
    MetricsSerializer,
    PayloadLogSerializer,
    PercentSerializer,
    RevisionSerializer,
    RoleSerializer,
    RollbackSerializer,
    SampleRowSerializer,
    ScaleSerializer,
    TrafficSerializer,
)
from apps.serving.filters import InferenceServiceFilterSet, RevisionFilterSet
from apps.serving.models import InferenceService, Replica, Revision
from apps.serving.services.config import SETTINGS
from apps.serving.services.metrics import traffic_series


class InferenceServiceViewSet(ProjectScopedViewSet):
    """Inference services of the projects you belong to: members see them, editors create, change, deploy, roll
    back, shift canary and shadow traffic, scale, stop, start and delete them. Requests to a service go to its
    `url` (the router), not here."""

    queryset = InferenceService.objects.select_related(
        "project",
        "registered_model",
        "model_version",
        "created_by",
        "current_revision",
        "canary_revision",
        "shadow_revision",
    ).prefetch_related(
        Prefetch("current_revision__replicas", queryset=Replica.objects.only("id", "revision_id", "status"))
    )
    serializer_class = InferenceServiceSerializer
    filterset_class = InferenceServiceFilterSet
    ordering_fields = ["name", "created_at", "updated_at", "status"]  # as InferenceServiceFilterSet (?search= too)
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]
    action_perms = {"metrics": VIEW, "payloads": VIEW, "sample_row": VIEW, "explain": VIEW, "ground_truth": CONTRIBUTE}

    def perform_create(self, serializer: InferenceServiceSerializer) -> None:
        data = dict(serializer.validated_data)
        project = data.pop("project")
        self.check_project(project)
        wants_deploy = data.pop("deploy", False)
        settings = {k: data[k] for k in SETTINGS if k in data}
        service = services.create_service(
            project, self.request.user, name=data.get("name", ""), deploy=wants_deploy, **settings
        )
        serializer.instance = service

    def perform_update(self, serializer: InferenceServiceSerializer) -> None:
        data = dict(serializer.validated_data)
        wants_deploy = data.pop("deploy", False)
        service, _redeploy = services.update_service(serializer.instance, **{k: data[k] for k in SETTINGS if k in data})
        if wants_deploy:
            services.deploy(service, self.request.user)
            service.refresh_from_db()
        serializer.instance = service

    def perform_destroy(self, instance: InferenceService) -> None:
        services.delete_service(instance)

    def _service_response(self, service: InferenceService) -> Response:
        return Response(self.get_serializer(self.get_queryset().get(pk=service.pk)).data)

    def _revision_response(self, revision: Revision | None, service: InferenceService) -> Response:
        if revision is None:  # following an alias that points nowhere yet
            service.refresh_from_db()
            return Response({"revision": None, "detail": service.reason}, status=status.HTTP_202_ACCEPTED)
        return Response(RevisionSerializer(revision, context=self.get_serializer_context()).data, status=201)

    @extend_schema(request=None, responses={201: RevisionSerializer, 202: OpenApiResponse(description="waiting")})
    @action(detail=True, methods=["post"])
    def deploy(self, request: Request, pk: str | None = None) -> Response:
        """Roll out a new revision of what the settings say; what serves keeps serving until it is ready. 202 when
        the service follows an alias that points nowhere yet (it deploys when the alias is set)."""
        service = self.get_object()
        return self._revision_response(services.deploy(service, request.user), service)

    @extend_schema(request=RollbackSerializer, responses={201: RevisionSerializer})
    @action(detail=True, methods=["post"])
    def rollback(self, request: Request, pk: str | None = None) -> Response:
        """Serve an earlier revision's version and config again (as a new revision, rolled out like any)."""
        service = self.get_object()
        body = RollbackSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return self._revision_response(
            services.rollback(service, request.user, body.validated_data["revision"]), service
        )

    @extend_schema(request=PercentSerializer, responses={201: RevisionSerializer})
    @action(detail=True, methods=["post"])
    def canary(self, request: Request, pk: str | None = None) -> Response:
        """Deploy a canary revision (of `model_version`, else of the settings) taking `percent` % once ready."""
        service = self.get_object()
        body = PercentSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        revision = services.deploy_canary(service, request.user, data["percent"], data.get("model_version"))
        return self._revision_response(revision, service)

    @extend_schema(request=PercentSerializer, responses={201: RevisionSerializer})
    @action(detail=True, methods=["post"])
    def shadow(self, request: Request, pk: str | None = None) -> Response:
        """Deploy a shadow revision receiving copies of `percent` % of the requests (its answers are dropped)."""
        service = self.get_object()
        body = PercentSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        revision = services.deploy_shadow(service, request.user, data["percent"], data.get("model_version"))
        return self._revision_response(revision, service)

    @extend_schema(request=TrafficSerializer, responses={200: InferenceServiceSerializer})
    @action(detail=True, methods=["post"])
    def traffic(self, request: Request, pk: str | None = None) -> Response:
        """Move the canary's (or shadow's) share of the requests."""
        service = self.get_object()
        body = TrafficSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return self._service_response(
            services.set_traffic(service, body.validated_data["role"], body.validated_data["percent"])
        )

    @extend_schema(request=None, responses={200: InferenceServiceSerializer})
    @action(detail=True, methods=["post"])
    def promote(self, request: Request, pk: str | None = None) -> Response:
        """The ready canary becomes the current revision; the previous one drains and stops."""
        return self._service_response(services.promote_canary(self.get_object()))

    @extend_schema(request=RoleSerializer, responses={200: InferenceServiceSerializer})
    @action(detail=True, methods=["post"])
    def withdraw(self, request: Request, pk: str | None = None) -> Response:
        """Abort the canary or stop the shadow: its revision leaves and its replicas stop."""
        service = self.get_object()
        body = RoleSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return self._service_response(services.withdraw(service, body.validated_data["role"]))

    @extend_schema(request=ScaleSerializer, responses={200: InferenceServiceSerializer})
    @action(detail=True, methods=["post"])
    def scale(self, request: Request, pk: str | None = None) -> Response:
        """New min/max replicas, applied at once (the autoscaler moves within them)."""
        service = self.get_object()
        body = ScaleSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return self._service_response(services.scale(service, **body.validated_data))

    @extend_schema(request=None, responses={200: InferenceServiceSerializer})
    @action(detail=True, methods=["post"])
    def stop(self, request: Request, pk: str | None = None) -> Response:
        """Stop every replica (the revisions stay; start serves the same again)."""
        return self._service_response(services.stop_service(self.get_object()))

    @extend_schema(request=None, responses={200: InferenceServiceSerializer})
    @action(detail=True, methods=["post"])
    def start(self, request: Request, pk: str | None = None) -> Response:
        """Serve again what served before the stop."""
        return self._service_response(services.start_service(self.get_object(), request.user))

    @extend_schema(request=None, responses={200: KeySerializer})
    @action(detail=True, methods=["post"], url_path="rotate-key")
    def rotate_key(self, request: Request, pk: str | None = None) -> Response:
        """A new service key (shown once; the previous key stops working). Used when the service's auth is "key"."""
        service = self.get_object()
        key = services.rotate_key(service)
        return Response({"key": key, "key_prefix": service.key_prefix})

    @extend_schema(parameters=[MetricsSerializer], responses={200: OpenApiResponse(description="per revision")})
    @action(detail=True, methods=["get"])
    def metrics(self, request: Request, pk: str | None = None) -> Response:
        """Per revision number, one point per minute: requests, errors, p50 and p99 latency (ms)."""
        service = self.get_object()
        query = MetricsSerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        return Response(traffic_series(service, query.validated_data.get("minutes", 60)))

    @extend_schema(responses={200: PayloadLogSerializer(many=True)})
    @action(detail=True, methods=["get"])
    def payloads(self, request: Request, pk: str | None = None) -> Response:
        """The logged requests of the service (payload logging), newest first, with their answers and ground truth."""
        service = self.get_object()
        logs = service.payload_logs.select_related("revision").order_by("-created_at", "-pk")
        page = self.paginate_queryset(logs)
        if page is not None:
            return self.get_paginated_response(PayloadLogSerializer(page, many=True).data)
        return Response(PayloadLogSerializer(logs, many=True).data)

    @extend_schema(parameters=[SampleRowSerializer], responses={200: OpenApiResponse(description="one row")})
    @action(detail=True, methods=["get"], url_path="sample-row")
    def sample_row(self, request: Request, pk: str | None = None) -> Response:
        """A row of the dataset version the served model was trained on (through lineage), one value per feature:
        {"dataset": "name@n", "file", "row", "columns", "values"}; 400 saying why when there is none."""
        service = self.get_object()
        query = SampleRowSerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        data = query.validated_data
        return Response(console.dataset_row(service, data.get("features") or [], data.get("index")))

    @extend_schema(
        request=OpenApiTypes.OBJECT,
        responses={
            200: ExplanationSerializer,
            400: OpenApiResponse(description="{error}: the request or the model's input is wrong"),
            503: OpenApiResponse(description="{error}: no replica is ready"),
        },
    )
    @action(detail=True, methods=["post"])
    def explain(self, request: Request, pk: str | None = None) -> Response:
        """Per-row SHAP values of the served model for an Open Inference Protocol v2 request (as infer takes), from a
        ready replica's /v2/models/<m>/explain; without `parameters.background` the portal adds rows of the dataset
        the model was trained on (docs/explainability.md)."""
        service = self.get_object()
        try:
            code, document = explaining.explain(service, request.data)
        except explaining.Unavailable as exc:
            return Response({"error": str(exc)}, status=status.HTTP_503_SERVICE_UNAVAILABLE)
        return Response(document, status=code)

    @extend_schema(
        request=GroundTruthSerializer, responses={200: OpenApiResponse(description="updated, unknown, accuracy")}
    )
    @action(detail=True, methods=["post"], url_path="ground-truth")
    def ground_truth(self, request: Request, pk: str | None = None) -> Response:
        """Delayed ground truth for logged requests, by request id (batch); answers how many were matched, the ids
        not logged for this service, and the service's live accuracy."""
        service = self.get_object()
        body = GroundTruthSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        result = payloads.record_labels(service, body.validated_data["labels"])
        return Response({**result, **payloads.accuracy(service)})


class RevisionViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ProjectScopedGenericViewSet):
    """Revisions of the services you can see (read-only: a revision is an immutable deploy record). The detail
    shows its replicas with their log tails."""

    queryset = Revision.objects.select_related("service__project", "model_version", "created_by").prefetch_related(
        "replicas"
    )
    serializer_class = RevisionSerializer
    filterset_class = RevisionFilterSet
    ordering_fields = ["number", "created_at"]
    action_perms: dict[str, str] = {"list": VIEW, "retrieve": VIEW}

    def get_serializer_context(self) -> dict[str, Any]:
        return {**super().get_serializer_context(), "with_logs": self.action == "retrieve"}
