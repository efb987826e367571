from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Count, Max, QuerySet
from django.http import HttpResponse, StreamingHttpResponse, UnreadablePostError
from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.parsers import BaseParser
from rest_framework.request import Request
from rest_framework.response import Response

from apps.datasets import downloads, services, uploads
from apps.datasets.api.serializers import (
    CommitResultSerializer,
    CommitSerializer,
    DatasetSerializer,
    DatasetVersionSerializer,
    DeleteResultSerializer,
    DiffSerializer,
    PreviewSerializer,
    StatsSerializer,
    UploadFileSerializer,
    UploadSessionSerializer,
    UsageSerializer,
    VersionFileSerializer,
)
from apps.datasets.filters import DatasetFilterSet, DatasetVersionFilterSet, UploadFileFilterSet, UploadSessionFilterSet
from apps.datasets.models import Dataset, DatasetVersion, UploadFile, UploadSession
from apps.datasets.previews import NoPreview, preview_for
from apps.projects.api.base import ProjectScopedGenericViewSet, ProjectScopedViewSet, request_token
from apps.projects.permissions import CONTRIBUTE, VIEW

FORCE = OpenApiParameter("force", OpenApiTypes.BOOL, description="Delete even if pipeline runs used it.")
PATH = OpenApiParameter("path", OpenApiTypes.STR, description="A file path inside the version.")


def _truthy(value: str | None) -> bool:
    return (value or "").lower() in ("1", "true", "yes", "on")


class DatasetViewSet(ProjectScopedViewSet):
    """Datasets of your projects. Versions are created through uploads (`/dataset-uploads/`)."""

    queryset = Dataset.objects.select_related("project", "created_by")
    serializer_class = DatasetSerializer
    filterset_class = DatasetFilterSet
    ordering_fields = ["name", "created_at"]  # DatasetFilterSet reads ?search= and ?ordering= (a bad one: 400)
    action_perms = {"lineage": VIEW}

    def get_queryset(self) -> QuerySet:
        qs = super().get_queryset().annotate(latest_version=Max("versions__number"), version_count=Count("versions"))
        return qs.order_by("name", "pk")  # `?project=` is DatasetFilterSet's

    def perform_create(self, serializer: DatasetSerializer) -> None:
        data = dict(serializer.validated_data)
        project = data.pop("project")
        self.check_project(project)
        dataset = services.create_dataset(project, self.request.user, **data)
        serializer.instance = self.get_queryset().get(pk=dataset.pk)

    def perform_update(self, serializer: DatasetSerializer) -> None:
        serializer.instance = services.update_dataset(serializer.instance, **serializer.validated_data)

    @extend_schema(parameters=[FORCE], responses={200: DeleteResultSerializer})
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Delete the dataset and purge the blobs no other dataset uses (`?force=true` if runs used it)."""
        purged = services.delete_dataset(self.get_object(), force=_truthy(request.query_params.get("force")))
        return Response({"purged_blobs": purged})

    @extend_schema(responses={200: UsageSerializer(many=True)})
    @action(detail=True, methods=["get"], pagination_class=None)  # the whole list, as the schema says
    def lineage(self, request: Request, pk: str | None = None) -> Response:
        """Which pipeline runs (and tasks) read or wrote which versions of this dataset."""
        return Response(UsageSerializer(services.lineage(self.get_object()), many=True).data)


class DatasetVersionViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, ProjectScopedGenericViewSet):
    """Immutable versions: files, previews, statistics, diff, lineage and downloads."""

    queryset = DatasetVersion.objects.select_related("dataset__project", "created_by", "parent")
    serializer_class = DatasetVersionSerializer
    filterset_class = DatasetVersionFilterSet
    ordering_fields = ["created_at", "number"]
    action_perms = {
        "files": VIEW, "preview": VIEW, "stats": VIEW, "diff": VIEW, "download": VIEW, "lineage": VIEW,
        "thumbnail": VIEW, "destroy": CONTRIBUTE,
    }  # fmt: skip

    @extend_schema(parameters=[FORCE], responses={200: DeleteResultSerializer})
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        """Delete the version and purge blobs no other version uses (`?force=true` if runs used it)."""
        purged = services.delete_version(self.get_object(), force=_truthy(request.query_params.get("force")))
        return Response({"purged_blobs": purged})

    @extend_schema(responses={200: VersionFileSerializer(many=True)})
    @action(detail=True, methods=["get"])
    def files(self, request: Request, pk: str | None = None) -> Response:
        """The manifest: path, size and SHA-256 of every file (paginated)."""
        qs = self.get_object().files.all()
        page = self.paginate_queryset(qs)
        return self.get_paginated_response(VersionFileSerializer(page, many=True).data)

    @extend_schema(parameters=[PATH], responses={200: PreviewSerializer})
    @action(detail=True, methods=["get"])
    def preview(self, request: Request, pk: str | None = None) -> Response:
        """First rows and column types (tables), thumbnail facts (images) or the start of a text file."""
        version = self.get_object()
        path = request.query_params.get("path", "")
        entry = version.files.filter(path=path).first()
        if entry is None:
            raise NotFound(_("No file “%(path)s” in this version.") % {"path": path})
        try:
            data = preview_for(version, entry)
        except NoPreview as exc:
            raise ValidationError({"path": [str(exc)]}) from exc
        return Response({"path": path, "kind": data.get("kind", "none"), "preview": data})

    @extend_schema(parameters=[PATH], responses={200: OpenApiResponse(description="A PNG thumbnail")})
    @action(detail=True, methods=["get"])
    def thumbnail(self, request: Request, pk: str | None = None) -> StreamingHttpResponse:
        return downloads.thumbnail_response(request, self.get_object(), request.query_params.get("path", ""))

    @extend_schema(responses={200: StatsSerializer})
    @action(detail=True, methods=["get"])
    def stats(self, request: Request, pk: str | None = None) -> Response:
        """Per file: row count and per column count, nulls, min, max, mean, distinct (after analysis)."""
        return Response(StatsSerializer(self.get_object()).data)

    @extend_schema(
        parameters=[
            OpenApiParameter("other", OpenApiTypes.INT, description="Version id to compare with (default: parent).")
        ],
        responses={200: DiffSerializer},
    )
    @action(detail=True, methods=["get"])
    def diff(self, request: Request, pk: str | None = None) -> Response:
        """What changed from `other` (default: the parent) to this version."""
        version = self.get_object()
        other_id = request.query_params.get("other")
        if other_id:
            other = self.get_queryset().filter(pk=other_id if other_id.isdigit() else None).first()
            if other is None:
                raise NotFound(_("No version %(id)s that you can see.") % {"id": other_id})
        else:
            other = version.parent
            if other is None:
                raise ValidationError({"other": [_("This version has no parent; name a version to compare with.")]})
        return Response(services.diff_versions(other, version))

    @extend_schema(
        parameters=[PATH],
        responses={
            (200, "application/octet-stream"): OpenApiTypes.BINARY,
            (206, "application/octet-stream"): OpenApiTypes.BINARY,
            416: OpenApiResponse(description="Range starts past the end of the file"),
        },
    )
    @action(detail=True, methods=["get"])
    def download(self, request: Request, pk: str | None = None) -> HttpResponse:
        """One file (`?path=`) or, without a path, the whole version as a streamed zip. A file honours
        `Range: bytes=N-` (206 with the bytes from N on), so a download that stopped continues."""
        version = self.get_object()
        path = request.query_params.get("path")
        if path:
            return downloads.file_response(request, version, path)
        return downloads.zip_response(request, version)

    @extend_schema(responses={200: UsageSerializer(many=True)})
    @action(detail=True, methods=["get"], pagination_class=None)  # the whole list, as the schema says
    def lineage(self, request: Request, pk: str | None = None) -> Response:
        version = self.get_object()
        return Response(
            UsageSerializer(
                version.usages.select_related("version__dataset", "pipeline_run", "task_run"), many=True
            ).data
        )


class UploadSessionViewSet(
    mixins.CreateModelMixin,
    mixins.RetrieveModelMixin,
    mixins.ListModelMixin,
    mixins.DestroyModelMixin,
    ProjectScopedGenericViewSet,
):
    """Resumable uploads. Create a session, announce files, PATCH their bytes, then commit a new version."""

    queryset = UploadSession.objects.select_related("project", "dataset").prefetch_related("files")
    serializer_class = UploadSessionSerializer
    filterset_class = UploadSessionFilterSet
    action_perms = {"add_file": CONTRIBUTE, "commit": CONTRIBUTE}

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        self.precheck_project()
        return super().create(request, *args, **kwargs)

    def perform_create(self, serializer: UploadSessionSerializer) -> None:
        data = serializer.validated_data
        dataset = data["dataset"]
        self.check_project(dataset.project)
        base = None
        ref = data.get("base")
        if ref not in (None, ""):
            try:
                base = services.resolve_dataset_arg(dataset.project, f"{dataset.name}@{ref}")
            except services.DatasetRefError as exc:
                raise ValidationError({"base": [str(exc)]}) from exc
        token = request_token(self.request)
        task_run = None
        if token is not None:  # a pipeline task's token: the version records the task (lineage)
            # The task model through this app's own lineage field: jobs is above datasets, which never imports it.
            TaskRun = UploadSession._meta.get_field("task_run").related_model
            task_run = TaskRun.objects.filter(api_token=token).select_related("run").first()
        serializer.instance = uploads.start_upload(
            dataset, self.request.user, message=data.get("message", ""), base=base, task_run=task_run
        )

    def perform_destroy(self, instance: UploadSession) -> None:
        uploads.abort_upload(instance)
        instance.delete()

    @extend_schema(request=UploadFileSerializer, responses={201: UploadFileSerializer})
    @action(detail=True, methods=["post"], url_path="files")
    def add_file(self, request: Request, pk: str | None = None) -> Response:
        """Announce a file: `path`, `size` and (optional) `sha256`; `archive: true` expands a zip/tar at commit."""
        session = self.get_object()
        body = UploadFileSerializer(data=request.data, context=self.get_serializer_context())
        body.is_valid(raise_exception=True)
        data = body.validated_data
        upload = uploads.add_file(
            session,
            path=data["path"],
            size=data["size"],
            sha256=data.get("sha256", ""),
            archive=data.get("archive", False),
        )
        return Response(UploadFileSerializer(upload, context=self.get_serializer_context()).data, status=201)

    @extend_schema(request=CommitSerializer, responses={201: CommitResultSerializer, 200: CommitResultSerializer})
    @action(detail=True, methods=["post"])
    def commit(self, request: Request, pk: str | None = None) -> Response:
        """Create the new version from the complete files, atomically (nothing is visible before): 201 with
        `created: true`. Files identical to the latest version's make no new version: 200, that version, `created:
        false`."""
        session = self.get_object()
        body = CommitSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        version, created = uploads.commit_upload(session, request.user, remove=body.validated_data["remove"])
        data = {**DatasetVersionSerializer(version).data, "created": created}
        return Response(data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class ChunkParser(BaseParser):
    """Declares the chunk media types; the view streams the body itself (it is never parsed whole)."""

    media_type = "application/offset+octet-stream"

    def parse(self, stream, media_type=None, parser_context=None):  # pragma: no cover - never called
        return {}


class OctetParser(ChunkParser):
    media_type = "application/octet-stream"


class UploadFileViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin, ProjectScopedGenericViewSet
):
    """Files of uploads (filter by `session`). GET/HEAD one: `Upload-Offset` says how much arrived; PATCH appends
    a chunk at that offset (tus semantics)."""

    queryset = UploadFile.objects.select_related("session__project")
    serializer_class = UploadFileSerializer
    filterset_class = UploadFileFilterSet
    parser_classes = [ChunkParser, OctetParser]
    http_method_names = ["get", "head", "patch", "delete", "options"]

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        upload = self.get_object()
        response = Response(self.get_serializer(upload).data)
        return _with_offset(response, upload)

    @extend_schema(
        request={"application/offset+octet-stream": OpenApiTypes.BINARY},
        parameters=[
            OpenApiParameter("Upload-Offset", OpenApiTypes.INT, OpenApiParameter.HEADER, required=True),
            OpenApiParameter(
                "Upload-Checksum", OpenApiTypes.STR, OpenApiParameter.HEADER, description="sha256 <base64>"
            ),
        ],
        responses={200: UploadFileSerializer, 409: OpenApiResponse(description="Offset mismatch; see Upload-Offset")},
    )
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Append bytes at `Upload-Offset`. Resume after an interruption from the offset GET/HEAD reports."""
        upload = self.get_object()
        if request.content_type.split(";")[0].strip() not in (ChunkParser.media_type, OctetParser.media_type):
            return Response(
                {"detail": _("Send the chunk as application/offset+octet-stream.")},
                status=status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
            )
        raw_offset = request.headers.get("Upload-Offset", "")
        if not raw_offset.isdigit():
            raise ValidationError({"offset": [_("The Upload-Offset header (a byte offset) is required.")]})
        length = request.headers.get("Content-Length")
        checksum = uploads.parse_checksum(request.headers.get("Upload-Checksum"))
        django_request = request._request  # read() streams the body; nothing buffers it whole
        try:
            upload = uploads.write_chunk(
                upload, int(raw_offset), django_request.read, int(length) if length and length.isdigit() else None,
                checksum,
            )  # fmt: skip
        except uploads.OffsetConflict as exc:
            response = Response({"detail": str(exc), "offset": exc.offset}, status=status.HTTP_409_CONFLICT)
            response["Upload-Offset"] = str(exc.offset)
            return response
        except UnreadablePostError:
            # The connection closed mid-chunk (streamed body, apps.datasets.asgi): the chunk was dropped whole
            # and nobody is left to read an answer; not a server error.
            return Response(
                {"detail": _("The connection closed before the chunk arrived whole; it was discarded.")},
                status=status.HTTP_400_BAD_REQUEST,
            )
        return _with_offset(Response(self.get_serializer(upload).data), upload)

    def perform_destroy(self, instance: UploadFile) -> None:
        uploads.remove_file(instance)


def _with_offset(response: Response, upload: UploadFile) -> Response:
    response["Upload-Offset"] = str(upload.offset)
    response["Upload-Length"] = str(upload.size)
    response["Tus-Resumable"] = "1.0.0"
    response["Cache-Control"] = "no-store"
    return response
