from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from apps.monitoring import services
from apps.monitoring.api.serializers import DriftMonitorSerializer, DriftReportSerializer
from apps.monitoring.filters import DriftMonitorFilterSet, DriftReportFilterSet
from apps.monitoring.models import DriftMonitor, DriftReport
from apps.projects.api.base import ProjectScopedGenericViewSet, ProjectScopedViewSet
from apps.projects.permissions import CONTRIBUTE, VIEW


class DriftMonitorViewSet(ProjectScopedViewSet):
    """Drift monitors of the services you can see: members read them and their reports, editors create, change,
    delete and `run` them (a report at once, as the scheduled job writes)."""

    queryset = DriftMonitor.objects.select_related("project", "service", "reference_version__dataset", "created_by")
    serializer_class = DriftMonitorSerializer
    filterset_class = DriftMonitorFilterSet
    search_fields = ["service__name"]
    ordering_fields = ["created_at", "last_run_at"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]
    action_perms = {"run": CONTRIBUTE, "series": VIEW}

    def perform_create(self, serializer: DriftMonitorSerializer) -> None:
        data = dict(serializer.validated_data)
        project = data.pop("project")
        self.check_project(project)
        service = data.pop("service")
        serializer.instance = services.create_monitor(project, self.request.user, service=service, **data)

    def perform_update(self, serializer: DriftMonitorSerializer) -> None:
        serializer.instance = services.update_monitor(serializer.instance, **serializer.validated_data)

    def perform_destroy(self, instance: DriftMonitor) -> None:
        services.delete_monitor(instance)

    @extend_schema(request=None, responses={201: DriftReportSerializer})
    @action(detail=True, methods=["post"])
    def run(self, request: Request, pk: str | None = None) -> Response:
        """Compare the window with the reference now; answers the report."""
        report = services.run_monitor(self.get_object())
        return Response(DriftReportSerializer(report).data, status=201)

    @action(detail=True, methods=["get"])
    def series(self, request: Request, pk: str | None = None) -> Response:
        """Per feature, its drift score at each report (oldest first), the overall score and the threshold."""
        return Response(services.series(self.get_object()))


class DriftReportViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ProjectScopedGenericViewSet):
    """Drift reports (read-only records; `?monitor=<id>&status=drifted`)."""

    queryset = DriftReport.objects.select_related("monitor__project", "reference_version__dataset")
    serializer_class = DriftReportSerializer
    filterset_class = DriftReportFilterSet
    ordering_fields = ["created_at", "score"]
    action_perms = {"list": VIEW, "retrieve": VIEW}
