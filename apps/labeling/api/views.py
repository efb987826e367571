from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.exceptions import APIException, NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from apps.datasets.models import DatasetVersion
from apps.labeling import annotate, autolabel, export, server, services, training
from apps.labeling.api.serializers import (
    AnnotationSerializer,
    AttachServiceSerializer,
    LabelingProjectSerializer,
    TrainingPipelineSerializer,
)
from apps.labeling.client import LabelStudioError, LabelStudioUnavailable
from apps.labeling.filters import LabelingProjectFilterSet
from apps.labeling.models import LabelingProject, MLBackend
from apps.projects.api.base import ProjectScopedViewSet
from apps.projects.permissions import CONTRIBUTE, VIEW
from apps.serving.models import InferenceService


class LabelStudioDown(APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "label_studio_unavailable"


class LabelStudioRefused(APIException):
    status_code = status.HTTP_502_BAD_GATEWAY
    default_code = "label_studio_error"


class ModelUnavailable(APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "model_unavailable"


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
    action_perms = {
        "export": CONTRIBUTE, "ml_backend": CONTRIBUTE, "preannotate": CONTRIBUTE, "uncertain": VIEW,
        "next_task": CONTRIBUTE, "annotations": CONTRIBUTE, "training_pipeline": CONTRIBUTE, "train": CONTRIBUTE,
    }  # fmt: skip

    def handle_exception(self, exc: Exception) -> Any:
        if isinstance(exc, autolabel.NotServing):
            exc = ModelUnavailable(str(exc))
        elif isinstance(exc, LabelStudioUnavailable):
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

    @extend_schema(request=AttachServiceSerializer, responses={201: dict})
    @action(detail=True, methods=["post"], url_path="ml-backend")
    def ml_backend(self, request: Request, pk: str | None = None) -> Response:
        """Attach an inference service of this project as Label Studio's ML backend (basic auth; Label Studio
        checks /health and /setup at once). A service of another project: 404."""
        labeling = self.get_object()
        given = AttachServiceSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        service_id = given.validated_data["service"]
        service = InferenceService.objects.filter(project=labeling.project, pk=service_id).first()
        if service is None:
            raise NotFound(_("No such inference service in this project."))
        row = autolabel.attach(labeling, service, request.user)
        body = {"service": service.pk, "ml_backend": row.ls_ml_backend_id, "url": autolabel.backend_url(row),
                "model_version": autolabel.model_version(service)}  # fmt: skip
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: dict})
    @action(detail=True, methods=["post"])
    def preannotate(self, request: Request, pk: str | None = None) -> Response:
        """Pre-annotate all: the attached service predicts every task, imported into Label Studio in bulk."""
        labeling = self.get_object()
        row = MLBackend.objects.filter(labeling_project=labeling).select_related("service").first()
        if row is None:
            raise ValidationError({"service": [_("Attach an inference service first.")]})
        return Response({"predictions": autolabel.preannotate_all(row)})

    @extend_schema(responses={200: dict})
    @action(detail=True, methods=["get"])
    def uncertain(self, request: Request, pk: str | None = None) -> Response:
        """The tasks in "uncertain first" order for active learning: lowest prediction score first."""
        tasks = autolabel.uncertain_first(self.get_object())
        return Response({"results": [{"task": t.ls_task_id, "path": t.path, "row": t.row, "score": t.score,
                                      "model_version": t.model_version} for t in tasks]})  # fmt: skip

    @extend_schema(
        parameters=[OpenApiParameter("task", int, description="A task's portal id (else the next one to do).")],
        responses={200: dict},
    )
    @action(detail=True, methods=["get"], url_path="next-task")
    def next_task(self, request: Request, pk: str | None = None) -> Response:
        """The next task to annotate ("uncertain first": lowest prediction score first), with its data, the
        model's predictions and the caller's own annotation if any; `task` null when all are done. Editors and
        above (the annotate page)."""
        labeling = self.get_object()
        raw = request.query_params.get("task")
        if raw is not None and not raw.isdigit():
            raise ValidationError({"task": [_("A task id is a whole number.")]})
        task = annotate.next_task(labeling, request.user, int(raw) if raw is not None else None)
        body: dict[str, Any] = {"task": None, "remaining": annotate.queue(labeling).count()}
        if task is not None:
            with server.connect() as client:
                body["task"] = annotate.task_payload(client, labeling, task, request.user)
        return Response(body)

    @extend_schema(request=AnnotationSerializer, responses={201: dict})
    @action(detail=True, methods=["post"])
    def annotations(self, request: Request, pk: str | None = None) -> Response:
        """Submit, update or skip one task as the caller: written to Label Studio with the portal's token and
        recorded as the caller's; the progress is re-read and the project's pages update live."""
        labeling = self.get_object()
        given = AnnotationSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        data = given.validated_data
        row = annotate.save_annotation(
            labeling, request.user, data["task"], data.get("result"),
            was_cancelled=data["was_cancelled"], lead_time=data.get("lead_time"),
        )  # fmt: skip
        body = {"id": row.pk, "task": row.task_id, "ls_annotation_id": row.ls_annotation_id,
                "annotator": row.username, "was_cancelled": row.was_cancelled}  # fmt: skip
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(request=TrainingPipelineSerializer, responses={200: dict})
    @action(detail=True, methods=["post"], url_path="training-pipeline")
    def training_pipeline(self, request: Request, pk: str | None = None) -> Response:
        """Choose the pipeline "train on these labels" (and Label Studio's START_TRAINING) starts: one of the same
        project with a dataset argument naming the labels dataset (`<name>-labels@…`); null clears it."""
        labeling = self.get_object()
        given = TrainingPipelineSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        labeling = training.set_training_pipeline(labeling, given.validated_data["pipeline"], request.user)
        return Response({"pipeline": labeling.training_pipeline_id, "dataset": export.labels_dataset_name(labeling)})

    @extend_schema(request=None, responses={201: dict})
    @action(detail=True, methods=["post"])
    def train(self, request: Request, pk: str | None = None) -> Response:
        """Train on these labels: export the annotations as a new dataset version and start the training pipeline
        on exactly that version. 400 when nothing is annotated or no pipeline is chosen."""
        made = training.train_on_labels(self.get_object(), request.user)
        body = {"version": made.version_id, "ref": made.version.ref, "run": made.run_id,
                "run_number": made.run.number}  # fmt: skip
        return Response(body, status=status.HTTP_201_CREATED)
