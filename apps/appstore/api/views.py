from __future__ import annotations

from django.db.models import QuerySet
from django.http import HttpResponse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, permissions, viewsets
from rest_framework.decorators import action
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request

from apps.appstore import services
from apps.appstore.api.serializers import (
    AppSerializer,
    AppVersionSerializer,
    BundleUploadSerializer,
    InstallationSerializer,
    PublishSerializer,
    UninstallSerializer,
)
from apps.appstore.filters import AppFilterSet, InstallationFilterSet
from apps.appstore.models import App, Installation
from apps.projects.api.base import ProjectScopedGenericViewSet, TokenScopePermission


class AppViewSet(viewsets.ReadOnlyModelViewSet):
    """The app catalogue: built-in apps and approved public ones for everyone, a project's own apps for its
    members (anything else is 404). `GET /apps/<id>/versions/` lists the versions with what each creates;
    `GET /apps/<id>/bundle/?version=` downloads a version's zip (its SHA-256 in the `Digest` header)."""

    queryset = App.objects.all()
    serializer_class = AppSerializer
    permission_classes = [permissions.IsAuthenticated, TokenScopePermission]
    filterset_class = AppFilterSet
    ordering_fields = ["name", "created_at"]

    def get_queryset(self) -> QuerySet[App]:
        return App.objects.visible_to(self.request.user).select_related("project").order_by("name", "pk")

    @extend_schema(request=BundleUploadSerializer, responses={201: AppVersionSerializer})
    @action(detail=False, methods=["post"], parser_classes=[MultiPartParser])
    def upload(self, request: Request) -> HttpResponse:
        """Add a bundle zip as a new version of the project's app (project admins); 400 names the manifest's fields
        at fault; "public" apps are seen by everyone once staff approve them."""
        from rest_framework import status
        from rest_framework.response import Response

        serializer = BundleUploadSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        version = services.import_bundle(
            data["bundle"].read(), data["project"], request.user, visibility=data["visibility"]
        )
        return Response(AppVersionSerializer(version).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=PublishSerializer, responses={201: AppVersionSerializer})
    @action(detail=False, methods=["post"])
    def publish(self, request: Request) -> HttpResponse:
        """Publish one of the project's pipelines, services or notebooks as a new version of the project's app
        `name` (project admins; docs/appstore.md#publishing). An object outside the project is 404; 400 names the
        fields at fault."""
        from django.http import Http404
        from rest_framework import status
        from rest_framework.response import Response

        from apps.appstore import publish
        from apps.jobs.models import Pipeline
        from apps.notebooks.models import Notebook
        from apps.serving.models import InferenceService

        serializer = PublishSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        project, kind, pk, files = data.pop("project"), data.pop("kind"), data.pop("object"), data.pop("files")
        model = {"pipeline": Pipeline, "service": InferenceService, "notebook": Notebook}[kind]
        obj = model.objects.filter(project=project, pk=pk).first()
        if obj is None:
            raise Http404
        if kind == "pipeline":
            version = publish.publish_pipeline(obj, request.user, **data)
        elif kind == "service":
            version = publish.publish_service(obj, request.user, **data)
        else:
            version = publish.publish_notebook(obj, request.user, files=files, **data)
        return Response(AppVersionSerializer(version).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses={200: AppVersionSerializer(many=True)})
    @action(detail=True, methods=["get"])
    def versions(self, request: Request, pk: str | None = None) -> HttpResponse:
        from rest_framework.response import Response

        app = self.get_object()
        return Response(AppVersionSerializer(app.versions.all(), many=True).data)

    @extend_schema(
        parameters=[OpenApiParameter("version", str, description="default: the newest")],
        responses={(200, "application/zip"): bytes},
    )
    @action(detail=True, methods=["get"])
    def bundle(self, request: Request, pk: str | None = None) -> HttpResponse:
        from django.http import Http404

        app = self.get_object()
        wanted = request.query_params.get("version")
        version = app.versions.filter(version=wanted).first() if wanted else app.latest
        if version is None:
            raise Http404
        response = HttpResponse(bytes(version.bundle), content_type="application/zip")
        response["Content-Disposition"] = f'attachment; filename="{app.name}-{version.version}.zip"'
        response["Digest"] = f"sha-256={version.digest}"
        return response


class InstallationViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    ProjectScopedGenericViewSet,
):
    """Apps installed in your projects. POST installs (all or nothing); DELETE uninstalls what it created, keeping
    datasets and trained models unless `?delete_data=true`."""

    queryset = Installation.objects.select_related("project", "app_version__app", "created_by").prefetch_related(
        "created"
    )
    serializer_class = InstallationSerializer
    filterset_class = InstallationFilterSet
    search_fields = ["name", "app_version__app__name"]
    ordering_fields = ["name", "created_at"]

    def create(self, request: Request, *args, **kwargs):
        self.precheck_project()
        return super().create(request, *args, **kwargs)

    def perform_create(self, serializer: InstallationSerializer) -> None:
        data = serializer.validated_data
        project = data["project"]
        self.check_project(project)
        version = services.resolve_app_version(self.request.user, project, data["app"], data.get("version"))
        serializer.instance = services.install(
            version, project, self.request.user, name=data.get("name", ""), parameters=data.get("parameters")
        )

    @extend_schema(parameters=[OpenApiParameter("delete_data", bool)])
    def destroy(self, request: Request, *args, **kwargs):
        return super().destroy(request, *args, **kwargs)

    def perform_destroy(self, instance: Installation) -> None:
        options = UninstallSerializer(data={"delete_data": self.request.query_params.get("delete_data", False)})
        options.is_valid(raise_exception=True)
        services.uninstall(instance, delete_data=options.validated_data["delete_data"])
