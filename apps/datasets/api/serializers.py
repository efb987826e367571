from __future__ import annotations

from typing import Any

from django.urls import reverse
from django.utils.translation import gettext as _
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


class UploadSessionSerializer(StrictModelSerializer):
    dataset = serializers.PrimaryKeyRelatedField(queryset=Dataset.objects.none())
    base = serializers.CharField(
        required=False, allow_null=True, write_only=True,
        help_text=_("Start from this version's files: “latest” or a version number (default: none)."),
    )  # fmt: skip
    base_version = serializers.PrimaryKeyRelatedField(source="base", read_only=True)
    project = serializers.CharField(source="project.slug", read_only=True)
    files = UploadFileSerializer(many=True, read_only=True)
    version = serializers.PrimaryKeyRelatedField(read_only=True)

    class Meta:
        model = UploadSession
        fields = [
            "id", "project", "dataset", "base", "base_version", "message", "status", "version", "task_run",
            "created_at", "updated_at", "files",
        ]  # fmt: skip
        read_only_fields = ["id", "status", "version", "task_run", "created_at", "updated_at"]

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        request = self.context.get("request")
        if request is not None:
            fields["dataset"].queryset = Dataset.objects.for_user(request.user, token=request_token(request))
        return fields


class CommitSerializer(StrictSerializer):
    remove = serializers.ListField(
        child=serializers.CharField(), required=False, default=list,
        help_text=_("Paths of the base version to leave out of the new version."),
    )  # fmt: skip


class DeleteResultSerializer(StrictSerializer):
    purged_blobs = serializers.ListField(child=serializers.CharField())
