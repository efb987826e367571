from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from apps.hpo import services
from apps.hpo.api.serializers import (
    KatibImportSerializer,
    RegisterBestSerializer,
    RerunBestSerializer,
    StudySerializer,
    TrialSerializer,
)
from apps.hpo.filters import StudyFilterSet, TrialFilterSet
from apps.hpo.models import Study
from apps.projects.api.base import ProjectScopedGenericViewSet
from apps.projects.permissions import CONTRIBUTE

DOCUMENT_FIELDS = (
    "name", "description", "objectives", "space", "algorithm", "early_stopping", "budget", "seed", "trial_template",
)  # fmt: skip


class StudyViewSet(
    mixins.CreateModelMixin, mixins.RetrieveModelMixin, mixins.ListModelMixin, ProjectScopedGenericViewSet
):
    """Hyperparameter studies of the projects you belong to. Creating one starts it; `stop` ends it (running trials
    are cancelled); `trials` lists its trials; `register-best` registers the best trial's model."""

    queryset = Study.objects.select_related("project", "created_by")
    serializer_class = StudySerializer
    filterset_class = StudyFilterSet
    search_fields = ["name", "description"]
    ordering_fields = ["name", "created_at", "status"]
    action_perms = {
        "stop": CONTRIBUTE, "trials": "view_project", "register_best": CONTRIBUTE, "katib_import": CONTRIBUTE,
        "katib_export": "view_project", "rerun_best": CONTRIBUTE,
    }  # fmt: skip

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        self.precheck_project()  # "not allowed" before "invalid" for a viewer
        return super().create(request, *args, **kwargs)

    def perform_create(self, serializer: StudySerializer) -> None:
        data = serializer.validated_data
        self.check_project(data["project"])
        document = {k: data[k] for k in DOCUMENT_FIELDS if k in data}
        serializer.instance = services.create_study(data["project"], self.request.user, document)

    @extend_schema(request=None, responses={200: StudySerializer})
    @action(detail=True, methods=["post"])
    def stop(self, request: Request, pk: str | None = None) -> Response:
        """Stop the study: no new trials, the running ones cancelled."""
        study = services.stop_study(self.get_object())
        return Response(StudySerializer(study, context=self.get_serializer_context()).data)

    @extend_schema(responses={200: TrialSerializer(many=True)})
    @action(detail=True, methods=["get"])
    def trials(self, request: Request, pk: str | None = None) -> Response:
        """The study's trials, numbered as Optuna numbers them (`?status=pruned`)."""
        study = self.get_object()
        trials = TrialFilterSet(request.query_params, queryset=study.trials.all()).qs
        page = self.paginate_queryset(trials)
        if page is not None:
            return self.get_paginated_response(TrialSerializer(page, many=True).data)
        return Response(TrialSerializer(trials, many=True).data)

    @extend_schema(request=RegisterBestSerializer, responses={201: dict[str, Any]})
    @action(detail=True, methods=["post"], url_path="register-best")
    def register_best(self, request: Request, pk: str | None = None) -> Response:
        """Register the model the best trial's tracking run logged as the next version of `name`."""
        study = self.get_object()
        body = RegisterBestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        version = services.register_best_model(study, request.user, **body.validated_data)
        data = {"name": version.registered_model.name, "version": version.version, "source": version.source}
        return Response(data, status=status.HTTP_201_CREATED)

    @extend_schema(request=KatibImportSerializer, responses={201: dict[str, Any]})
    @action(detail=False, methods=["post"], url_path="katib")
    def katib_import(self, request: Request) -> Response:
        """Make a study from a Katib Experiment. 400 names each bad field by its path in the Experiment
        (`spec.parameters[0].feasibleSpace.max`); `notes` say what was carried over only approximately."""
        self.precheck_project()
        body = KatibImportSerializer(data=request.data, context=self.get_serializer_context())
        body.is_valid(raise_exception=True)
        project = body.validated_data["project"]
        self.check_project(project)
        study, notes = services.import_katib(
            project, request.user, body.validated_data["experiment"], body.validated_data.get("name")
        )
        data = {"study": StudySerializer(study, context=self.get_serializer_context()).data, "notes": notes}
        return Response(data, status=status.HTTP_201_CREATED)

    @extend_schema(responses={200: dict[str, Any]})
    @action(detail=True, methods=["get"], url_path="katib")
    def katib_export(self, request: Request, pk: str | None = None) -> Response:
        """The study as a Katib Experiment (`experiment`, and as YAML in `yaml`), checked against Katib's schema;
        `notes` say what Katib cannot express. 400 when it cannot be exported (several nodes, NSGA-II)."""
        from apps.hpo import katib

        experiment, notes = services.export_katib(self.get_object())
        return Response({"experiment": experiment, "notes": notes, "yaml": katib.dump(experiment, notes)})

    @extend_schema(request=RerunBestSerializer, responses={201: dict[str, Any]})
    @action(detail=True, methods=["post"], url_path="rerun-best")
    def rerun_best(self, request: Request, pk: str | None = None) -> Response:
        """Run the best trial's pipeline again with its parameters and `args` replaced (e.g. a bigger dataset)."""
        study = self.get_object()
        body = RerunBestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        run = services.rerun_best(study, request.user, body.validated_data["args"])
        return Response({"run": run.pk, "name": run.pipeline_name}, status=status.HTTP_201_CREATED)
