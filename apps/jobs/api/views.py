from __future__ import annotations

from django.core.handlers.asgi import ASGIRequest
from django.db.models import Prefetch, QuerySet
from django.http import Http404, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404
from django.utils.http import content_disposition_header
from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError as DRFValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from apps.jobs import deletion, diagnosis, logs, schedules, services, usage
from apps.jobs.api import idempotency
from apps.jobs.api.serializers import (
    BackfillSerializer,
    DuplicateSerializer,
    ImageSerializer,
    JobTemplateSerializer,
    LogPageSerializer,
    LogQuerySerializer,
    PipelineRunSerializer,
    PipelineSerializer,
    PipelineYamlSerializer,
    ProjectFailuresSerializer,
    RerunSerializer,
    RunUsageSerializer,
    ScheduleSerializer,
    StartRunSerializer,
    TaskRunSerializer,
)
from apps.jobs.dryrun import choose_cluster, dry_run
from apps.jobs.filters import (
    ImageFilterSet,
    JobTemplateFilterSet,
    PipelineFilterSet,
    PipelineRunFilterSet,
    ScheduleFilterSet,
    TaskRunFilterSet,
)
from apps.jobs.models import Image, JobTemplate, Pipeline, PipelineRun, Schedule, TaskRun
from apps.jobs.yaml_io import dump_pipeline, load_pipeline
from apps.projects.api.base import ProjectScopedGenericViewSet, ProjectScopedViewSet, request_token
from apps.projects.models import Project
from apps.projects.permissions import CONTRIBUTE, VIEW, projects_for


class JobTemplateViewSet(ProjectScopedViewSet):
    """Job templates: the built-ins (no project) and your projects' own. Changing one makes a new version."""

    queryset = JobTemplate.objects.select_related("project")
    serializer_class = JobTemplateSerializer
    filterset_class = JobTemplateFilterSet
    search_fields = ["slug", "name", "description", "category"]
    http_method_names = ["get", "post", "delete", "head", "options"]

    def check_object_permissions(self, request: Request, obj: JobTemplate) -> None:
        if obj.project_id is None and self.action != "retrieve":
            self.permission_denied(request, message=_("Built-in templates cannot be changed."))
        if obj.project_id is not None:
            super().check_object_permissions(request, obj)

    def perform_create(self, serializer: JobTemplateSerializer) -> None:
        data = serializer.validated_data
        project = data.get("project")
        if project is None:
            self.permission_denied(self.request, message=_("Give the project the template belongs to."))
        self.check_project(project)
        serializer.instance = services.create_template(**data)


class ImageViewSet(ProjectScopedViewSet):
    """Container images a project's templates name, with the credentials of a private registry (the password is
    write-only; on Kubernetes it becomes an image pull secret). Built-in images (no project) are read-only."""

    queryset = Image.objects.select_related("project")
    serializer_class = ImageSerializer
    filterset_class = ImageFilterSet
    search_fields = ["name", "description", "registry"]

    def check_object_permissions(self, request: Request, obj: Image) -> None:
        if obj.project_id is None and self.action != "retrieve":
            self.permission_denied(request, message=_("Built-in images cannot be changed."))
        if obj.project_id is not None:
            super().check_object_permissions(request, obj)

    def perform_create(self, serializer: ImageSerializer) -> None:
        project = serializer.validated_data.get("project")
        if project is None:
            self.permission_denied(self.request, message=_("Give the project the image belongs to."))
        self.check_project(project)
        serializer.save()

    def create(self, request: Request, *args, **kwargs) -> Response:
        self.precheck_project()
        return super().create(request, *args, **kwargs)


class PipelineViewSet(ProjectScopedViewSet):
    """Pipelines (DAGs of templates). Saving validates the whole spec; errors name the node and field."""

    queryset = Pipeline.objects.select_related("project")
    serializer_class = PipelineSerializer
    filterset_class = PipelineFilterSet
    ordering_fields = ["name", "created_at", "updated_at"]  # PipelineFilterSet reads ?search= and ?ordering=
    action_perms = {
        "run": CONTRIBUTE, "duplicate": CONTRIBUTE, "export": VIEW, "manifests": VIEW, "import_yaml": CONTRIBUTE,
    }  # fmt: skip

    def perform_create(self, serializer: PipelineSerializer) -> None:
        data = serializer.validated_data
        self.check_project(data["project"])
        serializer.instance = services.save_pipeline(
            data["project"], self.request.user, name=data["name"], spec=data["spec"],
            description=data.get("description", ""), layout=data.get("layout"),
        )  # fmt: skip

    def perform_update(self, serializer: PipelineSerializer) -> None:
        pipeline = serializer.instance
        data = serializer.validated_data
        serializer.instance = services.save_pipeline(
            pipeline.project, self.request.user, pipeline=pipeline, name=data.get("name", pipeline.name),
            spec=data.get("spec", pipeline.spec), description=data.get("description", pipeline.description),
            layout=data.get("layout"),
        )  # fmt: skip

    def perform_destroy(self, instance: Pipeline) -> None:
        services.delete_pipeline(instance)

    @extend_schema(request=DuplicateSerializer, responses={201: PipelineSerializer})
    @action(detail=True, methods=["post"])
    def duplicate(self, request: Request, pk: str | None = None) -> Response:
        """A copy of the pipeline (spec, description, layout) under `name`, or "<name>-copy" when none is given."""
        pipeline = self.get_object()
        body = DuplicateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        copy = services.duplicate_pipeline(pipeline, request.user, body.validated_data.get("name", ""))
        return Response(PipelineSerializer(copy, context=self.get_serializer_context()).data, status=201)

    @extend_schema(
        request=StartRunSerializer,
        parameters=[idempotency.PARAMETER],
        responses={201: PipelineRunSerializer, 200: PipelineRunSerializer},
    )
    @action(detail=True, methods=["post"])
    def run(self, request: Request, pk: str | None = None) -> Response:
        """Start a run of this pipeline (201). With an `Idempotency-Key`, a retry returns the same run (200)."""
        pipeline = self.get_object()
        body = StartRunSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        ignore_cache = body.validated_data["ignore_cache"]
        trigger = "api" if request_token(request) else "manual"
        return idempotency.start_response(
            request,
            "run",
            pipeline.pk,
            lambda: services.start_run(pipeline, request.user, trigger=trigger, ignore_cache=ignore_cache),
        )

    @extend_schema(responses={200: OpenApiResponse(description="The pipeline as YAML")})
    @action(detail=True, methods=["get"])
    def export(self, request: Request, pk: str | None = None) -> HttpResponse:
        pipeline = self.get_object()
        response = HttpResponse(
            dump_pipeline(pipeline.name, pipeline.description, pipeline.spec), content_type="application/yaml"
        )
        response["Content-Disposition"] = f'attachment; filename="{pipeline.name}.yaml"'
        return response

    @extend_schema(
        parameters=[OpenApiParameter("cluster", str, description="a cluster of the project (default: its default)")],
        responses={200: OpenApiResponse(description="The Kubernetes objects a run would apply, as YAML")},
    )
    @action(detail=True, methods=["get"])
    def manifests(self, request: Request, pk: str | None = None) -> HttpResponse:
        """Dry run: the multi-document YAML the kubernetes runtime would apply for a run (nothing is created).
        Nodes that cannot run on the cluster are named in comments and in the `X-Portal-Unplaceable` header."""
        pipeline = self.get_object()
        try:
            cluster, namespace = choose_cluster(pipeline.project, request.query_params.get("cluster", ""))
        except LookupError as exc:
            raise DRFValidationError({"cluster": [str(exc)]}) from None
        result = dry_run(pipeline, cluster, namespace)
        response = HttpResponse(result.yaml(), content_type="application/yaml")
        if result.errors:
            response["X-Portal-Unplaceable"] = ",".join(result.errors)
        return response

    @extend_schema(request=PipelineYamlSerializer, responses={201: PipelineSerializer})
    @action(detail=False, methods=["post"], url_path="import")
    def import_yaml(self, request: Request) -> Response:
        """Create a pipeline from YAML, or update the one with the same name."""
        self.precheck_project()
        body = PipelineYamlSerializer(data=request.data, context=self.get_serializer_context())
        body.is_valid(raise_exception=True)
        project = body.validated_data["project"]
        self.check_project(project, CONTRIBUTE)
        name, description, spec = load_pipeline(body.validated_data["yaml"])
        existing = Pipeline.objects.filter(project=project, name=name).first()
        pipeline = services.save_pipeline(
            project, request.user, name=name, spec=spec, description=description, pipeline=existing
        )
        return Response(
            PipelineSerializer(pipeline, context=self.get_serializer_context()).data, status=status.HTTP_201_CREATED
        )


class PipelineRunViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin, ProjectScopedGenericViewSet
):
    """Runs: frozen executions of pipelines. Cancel, retry what failed, or re-run from a node."""

    queryset = PipelineRun.objects.select_related("project", "created_by")
    serializer_class = PipelineRunSerializer
    filterset_class = PipelineRunFilterSet
    ordering_fields = ["number", "pipeline_name", "status", "created_at", "started_at"]  # as PipelineRunFilterSet
    action_perms = {
        "cancel": CONTRIBUTE, "retry": CONTRIBUTE, "rerun": CONTRIBUTE, "usage": VIEW, "logs": VIEW,
        "logs_download": VIEW,
    }  # fmt: skip

    def get_queryset(self) -> QuerySet:
        failed = Prefetch("tasks", queryset=diagnosis.diagnosed(), to_attr="failed_attempts")
        return super().get_queryset().with_progress().prefetch_related(failed)

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "points",
                int,
                description=f"At most this many points per series (LTTB), {usage.MIN_POINTS}–{usage.MAX_POINTS}; "
                f"default {usage.DEFAULT_POINTS}.",
            )
        ],
        responses={200: RunUsageSerializer},
    )
    @action(detail=True, methods=["get"])
    def usage(self, request: Request, pk: str | None = None) -> Response:
        """CPU % and resident memory of each task attempt over time (the agent's samples), downsampled."""
        run = self.get_object()
        raw = request.query_params.get("points", str(usage.DEFAULT_POINTS))
        try:
            points = int(raw)
        except ValueError:
            points = 0
        if not usage.MIN_POINTS <= points <= usage.MAX_POINTS:
            message = _("Give a whole number from %(min)d to %(max)d.") % {
                "min": usage.MIN_POINTS, "max": usage.MAX_POINTS,
            }  # fmt: skip
            raise DRFValidationError({"points": [message]})
        return Response(usage.usage_series(run, points))

    def perform_destroy(self, instance: PipelineRun) -> None:
        deletion.delete_run(instance)

    @extend_schema(parameters=[LogQuerySerializer], responses={200: LogPageSerializer})
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def logs(self, request: Request, pk: str | None = None) -> Response:
        """The run's stored log lines in storage order, a page at a time: `next` continues after the last line of
        this page. Filter by `node`, `replica` or attempt (`task`); `q` keeps the lines that contain it. Live lines:
        the websocket `/ws/runs/{id}/logs/` (with `Authorization: Bearer <token>`; docs/sdk.md)."""
        run = self.get_object()
        names = LogQuerySerializer().fields
        query = LogQuerySerializer(data={k: v for k, v in request.query_params.items() if k in names})
        query.is_valid(raise_exception=True)
        data = query.validated_data
        if "q" in data and not data["q"].strip():
            raise DRFValidationError({"q": [_("Enter some text to search for.")]})
        lines = logs.history(
            run, after_id=data["after"], node=data.get("node") or None, replica=data.get("replica") or None,
            task_id=data.get("task"), q=data.get("q"), limit=data["limit"],
        )  # fmt: skip
        next_url = None
        if len(lines) == data["limit"]:
            params = request.query_params.copy()
            params["after"] = str(lines[-1]["id"])
            next_url = request.build_absolute_uri(f"{request.path}?{params.urlencode()}")
        return Response({"next": next_url, "results": lines})

    @extend_schema(
        parameters=[OpenApiParameter("node", str, description="only this node's lines")],
        responses={200: OpenApiResponse(description="The run's lines as text, one per line")},
    )
    @action(detail=True, methods=["get"], url_path="logs/download", pagination_class=None, filter_backends=[])
    def logs_download(self, request: Request, pk: str | None = None) -> StreamingHttpResponse:
        """Every stored line as text: `<time> [<node>#<attempt>/<replica>] <text>` (streamed)."""
        run = self.get_object()
        node = request.query_params.get("node") or None
        django_request = request._request
        # Under ASGI Django reads a synchronous iterator into memory before sending it: give it an async one.
        content = (
            logs.aiter_text(run, node)
            if isinstance(django_request, ASGIRequest)
            else logs.join_chunks(logs.iter_text(run, node))
        )
        response = StreamingHttpResponse(content, content_type="text/plain; charset=utf-8")
        name = f"{run.pipeline_name}-{run.number}" + (f"-{node}" if node else "")
        response["Content-Disposition"] = content_disposition_header(as_attachment=True, filename=f"{name}.log")
        return response

    @extend_schema(request=None, responses={200: PipelineRunSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        run = services.cancel_run(self.get_object())
        return Response(PipelineRunSerializer(run).data)

    @extend_schema(
        request=None,
        parameters=[idempotency.PARAMETER],
        responses={201: PipelineRunSerializer, 200: PipelineRunSerializer},
    )
    @action(detail=True, methods=["post"])
    def retry(self, request: Request, pk: str | None = None) -> Response:
        """A new run that reuses every node that succeeded and runs the rest again."""
        run = self.get_object()
        return idempotency.start_response(request, "retry", run.pk, lambda: services.rerun_from(run, request.user))

    @extend_schema(
        request=RerunSerializer,
        parameters=[idempotency.PARAMETER],
        responses={201: PipelineRunSerializer, 200: PipelineRunSerializer},
    )
    @action(detail=True, methods=["post"])
    def rerun(self, request: Request, pk: str | None = None) -> Response:
        """A new run from `node`: it and everything downstream run again, the rest is reused."""
        run = self.get_object()  # 404/403 before any word on the body
        body = RerunSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        node = body.validated_data.get("node")
        return idempotency.start_response(
            request, "rerun", run.pk, lambda: services.rerun_from(run, request.user, node=node)
        )


class TaskRunViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ProjectScopedGenericViewSet):
    """Task attempts of runs (filter by `run`), with status, waiting reason, timing and resource usage."""

    queryset = TaskRun.objects.select_related("run", "run__project")
    serializer_class = TaskRunSerializer
    filterset_class = TaskRunFilterSet
    action_perms = {"usage": VIEW, "failures": VIEW}

    @extend_schema(
        parameters=[OpenApiParameter("project", str, required=True, description="The project's slug.")],
        responses={200: dict},
    )
    @action(detail=False, methods=["get"], pagination_class=None, filter_backends=[])
    def usage(self, request: Request) -> Response:
        """What the project's running tasks use now (latest samples: CPU cores, memory, GPU) and per minute over
        the last hour, against its quota: the project overview's live meters."""
        return Response(usage.project_usage(self._project(request)))

    @extend_schema(
        parameters=[OpenApiParameter("project", str, required=True, description="The project's slug.")],
        responses={200: ProjectFailuresSerializer},
    )
    @action(detail=False, methods=["get"], pagination_class=None, filter_backends=[])
    def failures(self, request: Request) -> Response:
        """The project's failed attempts counted by diagnosed cause (docs/diagnosis.md), most frequent first, each
        with its next step."""
        return Response(diagnosis.project_failures(self._project(request)))

    def _project(self, request: Request) -> Project:
        """The project `?project=<slug>` names, among the user's (and the token's)."""
        slug = request.query_params.get("project", "")
        if not slug:
            raise DRFValidationError({"project": [_("Name the project (its slug).")]})
        project = get_object_or_404(projects_for(request.user), slug=slug)
        token = request_token(request)
        if token is not None and token.project_id not in (None, project.pk):
            raise Http404
        return project


class ScheduleViewSet(ProjectScopedViewSet):
    """Cron schedules of pipelines (catch-up, max active runs, depends on past)."""

    queryset = Schedule.objects.select_related("project", "pipeline")
    serializer_class = ScheduleSerializer
    filterset_class = ScheduleFilterSet

    def perform_create(self, serializer: ScheduleSerializer) -> None:
        self.check_project(serializer.validated_data["pipeline"].project)
        serializer.instance = schedules.save_schedule(**serializer.validated_data)

    def perform_update(self, serializer: ScheduleSerializer) -> None:
        pipeline = serializer.validated_data.get("pipeline", serializer.instance.pipeline)
        if pipeline.pk != serializer.instance.pipeline_id:
            # The schedule's runs start in the new pipeline's project: the user must be allowed to start them there.
            self.check_project(pipeline.project)
        serializer.instance = schedules.save_schedule(serializer.instance, **serializer.validated_data)

    def perform_destroy(self, instance: Schedule) -> None:
        schedules.delete_schedule(instance)

    @extend_schema(request=BackfillSerializer, responses={201: PipelineRunSerializer(many=True)})
    @action(detail=True, methods=["post"])
    def backfill(self, request: Request, pk: str | None = None) -> Response:
        """One run per date the schedule fires at from `start` to `end` (at most 50; dates with a run skipped)."""
        schedule = self.get_object()
        body = BackfillSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        runs = schedules.backfill(schedule, request.user, body.validated_data["start"], body.validated_data["end"])
        return Response(PipelineRunSerializer(runs, many=True, context=self.get_serializer_context()).data, status=201)
