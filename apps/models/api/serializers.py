from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.models.models import Experiment, ModelAlias, ModelVersion, RegisteredModel, Run
from apps.projects.api.serializers import StrictModelSerializer, StrictSerializer, VisibleProjectField


class ExperimentSerializer(StrictModelSerializer):
    project = VisibleProjectField()

    class Meta:
        model = Experiment
        fields = ["id", "project", "name", "artifact_location", "lifecycle_stage", "creation_time", "last_update_time"]
        read_only_fields = ["artifact_location", "lifecycle_stage", "creation_time", "last_update_time"]
        validators: list[Any] = []  # uniqueness is the service's

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        if self.instance is not None and not isinstance(self.instance, list):
            fields["project"].read_only = True
        return fields


class TrackingRunSerializer(StrictModelSerializer):
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    user_id = serializers.CharField(source="user_id_text", read_only=True)
    params = serializers.SerializerMethodField()
    tags = serializers.SerializerMethodField()
    metrics = serializers.SerializerMethodField()

    class Meta:
        model = Run
        fields = [
            "run_uuid", "project", "experiment", "name", "status", "start_time", "end_time", "user_id",
            "lifecycle_stage", "artifact_uri", "source_pipeline_run", "source_task", "git_commit", "image",
            "params", "tags", "metrics",
        ]  # fmt: skip
        read_only_fields = fields

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_params(self, run: Run) -> dict[str, str]:
        return {p.key: p.value for p in run.params.all()}

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_tags(self, run: Run) -> dict[str, str]:
        return {t.key: t.value for t in run.tags.all()}

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_metrics(self, run: Run) -> dict[str, Any]:
        return {m.key: {"value": m.number, "step": m.step, "timestamp": m.timestamp}
                for m in run.latest_metrics.all()}  # fmt: skip


class MetricSeriesSerializer(StrictSerializer):
    key = serializers.CharField()
    total = serializers.IntegerField(help_text="Points stored with a finite value (NaN and ±Infinity are not charted).")
    steps = serializers.ListField(child=serializers.FloatField())
    values = serializers.ListField(child=serializers.FloatField())


class RegisteredModelSerializer(StrictModelSerializer):
    project = VisibleProjectField()

    class Meta:
        model = RegisteredModel
        fields = ["id", "project", "name", "description", "creation_timestamp", "last_updated_timestamp"]
        read_only_fields = ["creation_timestamp", "last_updated_timestamp"]
        validators: list[Any] = []

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        if self.instance is not None and not isinstance(self.instance, list):
            fields["project"].read_only = True
        return fields


class ModelVersionSerializer(StrictModelSerializer):
    run_uuid = serializers.CharField(source="run.run_uuid", read_only=True, default=None)
    aliases = serializers.SlugRelatedField(slug_field="alias", many=True, read_only=True)

    class Meta:
        model = ModelVersion
        fields = [
            "id", "registered_model", "version", "source", "run", "run_uuid", "model_id", "status", "stage",
            "description", "model_card", "aliases", "creation_timestamp", "last_updated_timestamp",
        ]  # fmt: skip
        read_only_fields = [f for f in fields if f not in ("description", "model_card")]


class ModelAliasSerializer(StrictModelSerializer):
    version = serializers.IntegerField(source="model_version.version", read_only=True)

    class Meta:
        model = ModelAlias
        fields = ["id", "registered_model", "alias", "model_version", "version"]
        validators: list[Any] = []
