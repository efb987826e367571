from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from rest_framework import serializers

from apps.projects.api.serializers import AmountField, StrictModelSerializer, StrictSerializer, VisibleProjectField
from apps.serving.models import InferenceService, PayloadLog, Replica, Revision


class ReplicaSerializer(StrictModelSerializer):
    """A replica as the API shows it: never its loopback address (the router is the way in)."""

    class Meta:
        model = Replica
        fields = ["id", "index", "status", "reason", "cpu_percent", "started_at", "ready_at", "stopped_at", "log_tail"]
        read_only_fields = fields

    def to_representation(self, instance: Replica) -> dict[str, Any]:
        data = super().to_representation(instance)
        if not self.context.get("with_logs"):
            data.pop("log_tail")
        return data


class RevisionSerializer(StrictModelSerializer):
    """An immutable deploy record: what was served (version, frozen config), by whom, how the rollout went."""

    service = serializers.PrimaryKeyRelatedField(read_only=True)
    service_name = serializers.CharField(source="service.name", read_only=True)
    project = serializers.CharField(source="service.project.slug", read_only=True)
    registered_model = serializers.SerializerMethodField()
    model_version = serializers.IntegerField(source="model_version.version", read_only=True, allow_null=True)
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    replicas = ReplicaSerializer(many=True, read_only=True)

    class Meta:
        model = Revision
        fields = [
            "id", "service", "service_name", "project", "number", "role", "status", "reason", "registered_model",
            "model_version", "config", "traffic_percent", "desired_replicas", "created_by", "created_at", "ready_at",
            "retired_at", "replicas",
        ]  # fmt: skip
        read_only_fields = fields

    def get_registered_model(self, revision: Revision) -> str | None:
        return revision.config.get("registered_model")


class InferenceServiceSerializer(StrictModelSerializer):
    """A service as the API shows and takes it. Settings are checked by the service layer (the same messages as
    the pages). `registered_model` is a name in the project; `model_version` a version number of it, or null with
    `follow_alias`; `memory` takes "1Gi", "512Mi" or bytes; `deploy: true` rolls out a revision after saving."""

    project = VisibleProjectField()
    registered_model = serializers.CharField(
        required=False,
        write_only=True,
        allow_blank=True,
        allow_null=True,
        help_text=_("Name of a registered model of the project."),
    )
    model_version = serializers.IntegerField(
        required=False,
        write_only=True,
        allow_null=True,
        min_value=1,
        help_text=_("A version number; null to follow an alias."),
    )
    command = serializers.JSONField(required=False, help_text=_("custom only: argv; {port} is filled in"))
    env = serializers.JSONField(required=False)
    cpu = AmountField(required=False, help_text=_("CPU cores per replica, e.g. 1 or 0.5."))
    memory = serializers.CharField(required=False, write_only=True, help_text=_("per replica: e.g. 512Mi, 2Gi"))
    gpu = AmountField(required=False)
    deploy = serializers.BooleanField(required=False, write_only=True, default=False)
    url = serializers.CharField(source="base_path", read_only=True)
    current_revision = serializers.IntegerField(source="current_revision.number", read_only=True, allow_null=True)
    canary_revision = serializers.IntegerField(source="canary_revision.number", read_only=True, allow_null=True)
    shadow_revision = serializers.IntegerField(source="shadow_revision.number", read_only=True, allow_null=True)
    replicas = serializers.SerializerMethodField()
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = InferenceService
        fields = [
            "id", "project", "name", "description", "stage", "registered_model", "model_version", "follow_alias",
            "framework", "image", "command", "env", "cpu", "memory", "memory_bytes", "gpu", "min_replicas",
            "max_replicas", "scale_metric", "scale_target", "auth", "key_prefix", "status", "reason", "url",
            "current_revision", "canary_revision", "canary_percent", "shadow_revision", "shadow_percent", "replicas",
            "payload_log_percent", "payload_log_max_kb", "payload_log_keep", "deploy", "created_by", "created_at",
            "updated_at",
        ]  # fmt: skip
        read_only_fields = [
            "memory_bytes", "key_prefix", "status", "reason", "canary_percent", "shadow_percent", "created_at",
            "updated_at",
        ]  # fmt: skip
        validators: list[Any] = []  # uniqueness and the rest are the service layer's (one message for pages and API)
        extra_kwargs = {
            "name": {"validators": []},
            "stage": {"validators": []},
            "framework": {"validators": []},
            "scale_metric": {"validators": []},
            "auth": {"validators": []},
            "min_replicas": {"validators": []},
            "max_replicas": {"validators": []},
            "scale_target": {"validators": []},
            "payload_log_percent": {"validators": []},
            "payload_log_max_kb": {"validators": []},
            "payload_log_keep": {"validators": []},
        }

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        if self.instance is not None and not isinstance(self.instance, list):
            for name in ("project", "name"):  # fixed once created: the name is in the service's URL
                fields[name].read_only = True
        return fields

    def to_representation(self, instance: InferenceService) -> dict[str, Any]:
        data = super().to_representation(instance)
        data["registered_model"] = instance.registered_model.name if instance.registered_model_id else None
        data["model_version"] = instance.model_version.version if instance.model_version_id else None
        data["cpu"], data["gpu"] = float(instance.cpu), float(instance.gpu)
        return data

    def get_replicas(self, service: InferenceService) -> dict[str, int]:
        """Ready and wanted replicas of the current revision."""
        ready, wanted = service.replica_counts()
        return {"ready": ready, "wanted": wanted}


TRAFFIC_ROLES = [
    (Revision.Role.CANARY.value, Revision.Role.CANARY.label),
    (Revision.Role.SHADOW.value, Revision.Role.SHADOW.label),
]


class PercentSerializer(StrictSerializer):
    percent = serializers.IntegerField(min_value=0, max_value=100)
    model_version = serializers.IntegerField(required=False, allow_null=True, min_value=1)


class TrafficSerializer(StrictSerializer):
    role = serializers.ChoiceField(choices=TRAFFIC_ROLES)
    percent = serializers.IntegerField(min_value=0, max_value=100)


class RoleSerializer(StrictSerializer):
    role = serializers.ChoiceField(choices=TRAFFIC_ROLES)


class RollbackSerializer(StrictSerializer):
    revision = serializers.IntegerField(min_value=1, help_text=_("The number of the revision to serve again."))


class ScaleSerializer(StrictSerializer):
    min_replicas = serializers.IntegerField(min_value=1)
    max_replicas = serializers.IntegerField(min_value=1)


class KeySerializer(StrictSerializer):
    key = serializers.CharField(help_text=_("Shown once: only its digest is kept."))
    key_prefix = serializers.CharField()


class MetricsSerializer(serializers.Serializer):  # query parameters, not a body: other keys (format, …) are fine
    minutes = serializers.IntegerField(min_value=1, max_value=1440, default=60, required=False)


class SampleRowSerializer(serializers.Serializer):  # query parameters
    features = serializers.CharField(required=False, allow_blank=True, max_length=10_000,
                                     help_text="Comma-separated feature names, in the model's order.")  # fmt: skip
    index = serializers.IntegerField(required=False, min_value=0, help_text="Row number (random when absent).")

    def validate_features(self, value: str) -> list[str]:
        return [name.strip() for name in value.split(",") if name.strip()]


class GroundTruthSerializer(StrictSerializer):
    labels = serializers.ListField(
        child=serializers.JSONField(),
        allow_empty=False,
        max_length=1000,
        help_text=_("[{request_id, label}]: the X-Portal-Request-Id of a logged request and its true class (a list "
                    "of classes for a request of several rows)."),
    )  # fmt: skip


class PayloadLogSerializer(serializers.ModelSerializer):
    revision = serializers.IntegerField(source="revision.number", read_only=True)

    class Meta:
        model = PayloadLog
        fields = [
            "request_id", "revision", "created_at", "path", "headers", "request", "request_bytes", "status",
            "response", "response_bytes", "label", "labelled_at",
        ]  # fmt: skip
        read_only_fields = fields


class ExplainedRowSerializer(serializers.Serializer):  # response schema only
    base_value = serializers.ListField(child=serializers.FloatField(), help_text="Mean output over the background.")
    output = serializers.ListField(child=serializers.FloatField(), help_text="The model's output on this row.")
    contributions = serializers.ListField(
        child=serializers.ListField(child=serializers.FloatField()),
        help_text="Per feature, one value per output column; they add up to output - base_value.",
    )


class ExplanationSerializer(serializers.Serializer):  # response schema only (the model server's document)
    model_name = serializers.CharField()
    model_version = serializers.CharField()
    method = serializers.ChoiceField(["shapley-exact", "shapley-permutation"])
    output = serializers.CharField(help_text="The output explained (predict_proba, decision_function, predict…).")
    output_columns = serializers.ListField(child=serializers.CharField())
    feature_names = serializers.ListField(child=serializers.CharField())
    background = serializers.DictField(help_text="rows, source (parameters or request), dataset")
    rows = ExplainedRowSerializer(many=True)
    predict = serializers.ListField(child=serializers.JSONField(), required=False)
    permutations = serializers.IntegerField(required=False)
