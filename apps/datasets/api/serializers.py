from __future__ import annotations

from typing import Any

from django.urls import reverse
from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.datasets.models import Dataset, DatasetUsage, DatasetVersion, UploadFile, UploadSession, VersionFile
from apps.projects.api.base import request_token
from apps.projects.api.serializers import StrictModelSerializer, StrictSerializer, VisibleProjectField


class DatasetSerializer(StrictModelSerializer):
    project = VisibleProjectField()
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    latest_version = serializers.IntegerField(read_only=True, allow_null=True, help_text=_("Newest version number."))
    version_count = serializers.IntegerField(read_only=True)

    class Meta:
        model = Dataset
        fields = [
            "id", "project", "name", "description", "tags", "licence", "source", "created_by", "created_at",
            "latest_version", "version_count",
        ]  # fmt: skip
        read_only_fields = ["created_at"]
        validators: list[Any] = []  # uniqueness is the service's (one message for pages and API)

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        if self.instance is not None and not isinstance(self.instance, list):
            fields["project"].read_only = True
        return fields

    def validate_tags(self, value: Any) -> list[str]:
        if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
            raise serializers.ValidationError(_("Tags are a list of strings."))
        return value


class DatasetVersionSerializer(StrictModelSerializer):
    dataset_name = serializers.CharField(source="dataset.name", read_only=True)
    project = serializers.CharField(source="dataset.project.slug", read_only=True)
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    parent_number = serializers.IntegerField(source="parent.number", read_only=True, allow_null=True)
    ref = serializers.CharField(read_only=True)
    row_count = serializers.IntegerField(read_only=True, allow_null=True)

    class Meta:
        model = DatasetVersion
        fields = [
            "id", "dataset", "dataset_name", "project", "number", "ref", "message", "parent", "parent_number",
            "digest", "total_size", "file_count", "row_count", "created_by", "created_at", "task_run",
            "pipeline_run", "analysis_status", "schema",
        ]  # fmt: skip
        read_only_fields = fields


class VersionFileSerializer(StrictModelSerializer):
    sha256 = serializers.CharField(source="blob_id", read_only=True)

    class Meta:
        model = VersionFile
        fields = ["path", "size", "sha256"]
        read_only_fields = fields


class StatsSerializer(StrictModelSerializer):
    class Meta:
        model = DatasetVersion
        fields = ["id", "analysis_status", "analysis_error", "schema", "statistics"]
        read_only_fields = fields


class PreviewSerializer(StrictSerializer):
    path = serializers.CharField()
    kind = serializers.CharField(help_text=_("table, image, text or none"))
    preview = serializers.JSONField()


class DiffSerializer(StrictSerializer):
    old = serializers.IntegerField()
    new = serializers.IntegerField()
    added = serializers.JSONField()
    removed = serializers.JSONField()
    changed = serializers.JSONField()
    unchanged = serializers.IntegerField()
    rows = serializers.JSONField()
    schema_changes = serializers.JSONField(allow_null=True, help_text=_("Null until both versions are analysed."))
    analysis_pending = serializers.BooleanField()


class UsageSerializer(StrictModelSerializer):
    ref = serializers.CharField(source="version.ref", read_only=True)
    run_number = serializers.IntegerField(source="pipeline_run.number", read_only=True, allow_null=True)
    pipeline = serializers.CharField(source="pipeline_run.pipeline_name", read_only=True, allow_null=True)
    node = serializers.CharField(source="task_run.node", read_only=True, allow_null=True)

    class Meta:
        model = DatasetUsage
        fields = [
            "id",
            "version",
            "ref",
            "direction",
            "pipeline_run",
            "run_number",
            "pipeline",
            "task_run",
            "node",
            "created_at",
        ]
        read_only_fields = fields


class UploadFileSerializer(StrictModelSerializer):
    complete = serializers.BooleanField(read_only=True)
    upload_url = serializers.SerializerMethodField()

    class Meta:
        model = UploadFile
        fields = ["id", "session", "path", "size", "sha256", "archive", "offset", "complete", "upload_url"]
        read_only_fields = ["id", "session", "offset", "complete", "upload_url"]
        extra_kwargs = {"path": {"allow_blank": True}, "sha256": {"required": False}}
        validators: list[Any] = []

    def get_upload_url(self, obj: UploadFile) -> str:
        request = self.context.get("request")
        url = reverse("api:datasetuploadfile-detail", kwargs={"pk": obj.pk})
        return request.build_absolute_uri(url) if request is not None else url


@extend_schema_field({"oneOf": [{"type": "integer"}, {"type": "string"}]})
class DatasetRefField(serializers.Field):
    """A dataset by name (within the session's `project`) or by id; resolved by the serializer's `validate`."""

    def to_internal_value(self, data: Any) -> int | str:
        if isinstance(data, bool) or not isinstance(data, int | str) or data == "":
            raise serializers.ValidationError(_("Give the dataset's name (with `project`) or its id."))
        return data

    def to_representation(self, value: Any) -> int:
        return value.pk if isinstance(value, Dataset) else value


class UploadSessionSerializer(StrictModelSerializer):
    project = VisibleProjectField(
        required=False, help_text=_("The dataset's project (needed when `dataset` is a name; checked when an id).")
    )
    dataset = DatasetRefField(help_text=_("The dataset's name in `project`, or its id."))
    base = serializers.CharField(
        required=False, allow_null=True, write_only=True,
        help_text=_("Start from this version's files: “latest” or a version number (default: none)."),
    )  # fmt: skip
    base_version = serializers.PrimaryKeyRelatedField(source="base", read_only=True)
    files = UploadFileSerializer(many=True, read_only=True)
    version = serializers.PrimaryKeyRelatedField(read_only=True)

    class Meta:
        model = UploadSession
        fields = [
            "id", "project", "dataset", "base", "base_version", "message", "status", "version", "task_run",
            "created_at", "updated_at", "files",
        ]  # fmt: skip
        read_only_fields = ["id", "status", "version", "task_run", "created_at", "updated_at"]

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """`dataset` becomes the Dataset: by name inside `project`, or by id (and then inside `project` if named);
        a dataset of another project than the one named is refused rather than used there."""
        request = self.context["request"]
        visible = Dataset.objects.for_user(request.user, token=request_token(request)).select_related("project")
        project, ref = attrs.get("project"), attrs["dataset"]
        dataset = None
        if project is not None and isinstance(ref, str):
            dataset = visible.filter(project=project, name=ref).first()
        if dataset is None and (isinstance(ref, int) or ref.isdigit()):
            dataset = visible.filter(pk=int(ref)).first()
            if dataset is not None and project is not None and dataset.project_id != project.pk:
                message = _("Dataset %(id)s belongs to project “%(other)s”, not “%(project)s”.")
                raise serializers.ValidationError(
                    {"dataset": [message % {"id": ref, "other": dataset.project.slug, "project": project.slug}]}
                )
        if dataset is None:
            if project is None and isinstance(ref, str) and not ref.isdigit():
                raise serializers.ValidationError({"project": [_("Name the project of dataset “%(name)s”.") % {
                    "name": ref}]})  # fmt: skip
            where = _(" in project “%(project)s”") % {"project": project.slug} if project is not None else ""
            raise serializers.ValidationError(
                {"dataset": [_("No dataset “%(ref)s”%(where)s that you can access.") % {"ref": ref, "where": where}]}
            )
        attrs["dataset"], attrs["project"] = dataset, dataset.project
        return attrs


class CommitResultSerializer(DatasetVersionSerializer):
    created = serializers.BooleanField(
        read_only=True,
        help_text=_("False when the upload held exactly the files of the latest version: no new version was made."),
    )

    class Meta(DatasetVersionSerializer.Meta):
        fields = [*DatasetVersionSerializer.Meta.fields, "created"]
        read_only_fields = fields


class CommitSerializer(StrictSerializer):
    remove = serializers.ListField(
        child=serializers.CharField(), required=False, default=list,
        help_text=_("Paths of the base version to leave out of the new version."),
    )  # fmt: skip


class DeleteResultSerializer(StrictSerializer):
    purged_blobs = serializers.ListField(child=serializers.CharField())
