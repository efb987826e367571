from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.exceptions import APIException
from rest_framework.request import Request
from rest_framework.response import Response

from apps.datasets.models import DatasetVersion
from apps.labeling import export, services
from apps.labeling.api.serializers import LabelingProjectSerializer
from apps.labeling.client import LabelStudioError, LabelStudioUnavailable
from apps.labeling.filters import LabelingProjectFilterSet
from apps.labeling.models import LabelingProject
from apps.projects.api.base import ProjectScopedViewSet
from apps.projects.permissions import CONTRIBUTE


class LabelStudioDown(APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "label_studio_unavailable"


class LabelStudioRefused(APIException):
    status_code = status.HTTP_502_BAD_GATEWAY
    default_code = "label_studio_error"


class LabelingProjectViewSet(ProjectScopedViewSet):
    """Labeling projects of the projects you belong to: tasks from a dataset version, annotated in Label Studio.
    Editors and above create and delete them; viewers see them and their progress. While Label Studio is down or
    starting, writes answer 503 saying so, and nothing is written."""

    queryset = LabelingProject.objects.select_related("project", "dataset_version__dataset")
    serializer_class = LabelingProjectSerializer
    filterset_class = LabelingProjectFilterSet
    search_fields = ["name", "description"]
    ordering_fields = ["name", "created_at", "status"]
    http_method_names = ["get", "post", "delete", "head", "options"]
    action_perms = {"export": CONTRIBUTE}

    def handle_exception(self, exc: Exception) -> Any:
        if isinstance(exc, LabelStudioUnavailable):
            exc = LabelStudioDown(str(exc))
        elif isinstance(exc, LabelStudioError):
            exc = LabelStudioRefused(_("Label Studio refused the request: %(detail)s") % {"detail": exc.detail})
        return super().handle_exception(exc)

    def perform_create(self, serializer: LabelingProjectSerializer) -> None:
        data = serializer.validated_data
        project = data["project"]
        self.check_project(project)
        version = DatasetVersion.objects.filter(pk=data["dataset_version_id"], dataset__project=project).first()
        if version is None:
            raise ValidationError({"dataset_version": [_("Choose a dataset version of this project.")]})
        serializer.instance = services.create_labeling_project(
            project,
            self.request.user,
            name=data.get("name", ""),
            dataset_version=version,
            kind=data.get("kind", ""),
            labels=data.get("labels"),
            label_config=data.get("label_config", ""),
            text_column=data.get("text_column", ""),
            description=data.get("description", ""),
        )

    def perform_destroy(self, instance: LabelingProject) -> None:
        services.delete_labeling_project(instance)

    @extend_schema(request=None, responses={201: dict})
    @action(detail=True, methods=["post"])
    def export(self, request: Request, pk: str | None = None) -> Response:
        """The annotations as a new dataset version (Label Studio JSON, plus COCO and YOLO for boxes or CSV for
        classification); 400 when nothing is annotated yet."""
        made = export.export_annotations(self.get_object(), request.user)
        body = {"version": made.version_id, "ref": made.version.ref, "formats": made.formats,
                "annotated_tasks": made.annotated_tasks}  # fmt: skip
        return Response(body, status=status.HTTP_201_CREATED)
