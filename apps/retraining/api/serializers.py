from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from rest_framework import serializers

from apps.projects.api.serializers import StrictModelSerializer, VisibleProjectField
from apps.retraining.models import DataCheck, DataMonitor, PromotionDecision, Retraining, RetrainPolicy


def _ref(field: str, help_text: str, **kwargs: Any) -> serializers.CharField:
    return serializers.CharField(help_text=help_text, **kwargs)


class RetrainPolicySerializer(StrictModelSerializer):
    """A retrain policy. `pipeline`, `dataset`, `registered_model`: a row of the project by name (or id);
    `drift_monitor`: a drift monitor by its service's name (or id), or null; `arguments`: {"node": {"argument":
    value}} with the placeholders "{version}", "{previous}", "{champion}", "{champion_version}", "{reason}"."""

    project = VisibleProjectField()
    pipeline = _ref("pipeline", _("The pipeline's name (or id)."))
    dataset = _ref("dataset", _("The dataset's name (or id)."))
    registered_model = _ref("registered_model", _("The registered model's name (or id)."))
    drift_monitor = _ref(
        "drift_monitor", _("A drift monitor: its service's name (or its id)."), required=False, allow_null=True,
        allow_blank=True,
    )  # fmt: skip
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = RetrainPolicy
        fields = [
            "id", "project", "name", "pipeline", "mode", "arguments", "dataset", "dataset_argument", "registered_model",
            "alias", "metric", "higher_is_better", "margin", "require_approval", "drift_monitor", "cooldown_minutes",
            "enabled", "created_by", "created_at",
        ]  # fmt: skip
        read_only_fields = ["created_at"]
        validators: list[Any] = []  # the service's (one message for pages and API)
        extra_kwargs = {
            name: {"validators": []} for name in ("name", "margin", "cooldown_minutes", "mode", "alias", "metric")
        }

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        if self.instance is not None and not isinstance(self.instance, list):
            fields["project"].read_only = True
        return fields

    def to_representation(self, instance: RetrainPolicy) -> dict[str, Any]:
        data = super().to_representation(instance)
        data["pipeline"] = instance.pipeline.name
        data["dataset"] = instance.dataset.name
        data["registered_model"] = instance.registered_model.name
        data["drift_monitor"] = instance.drift_monitor_id
        return data


class DataMonitorSerializer(StrictModelSerializer):
    """A data monitor of a dataset; `dataset` and `policy` by name (or id)."""

    project = VisibleProjectField()
    dataset = _ref("dataset", _("The dataset's name (or id)."))
    policy = _ref("policy", _("The retrain policy's name (or id)."))
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = DataMonitor
        fields = [
            "id", "project", "name", "dataset", "policy", "min_changed_percent", "drift_threshold", "target_column",
            "interval_minutes", "enabled", "next_run_at", "created_by", "created_at",
        ]  # fmt: skip
        read_only_fields = ["next_run_at", "created_at"]
        validators: list[Any] = []
        extra_kwargs = {
            name: {"validators": []}
            for name in ("name", "min_changed_percent", "drift_threshold", "interval_minutes", "target_column")
        }

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        if self.instance is not None and not isinstance(self.instance, list):
            fields["project"].read_only = True
        return fields

    def to_representation(self, instance: DataMonitor) -> dict[str, Any]:
        data = super().to_representation(instance)
        data["dataset"], data["policy"] = instance.dataset.name, instance.policy.name
        return data


class DataCheckSerializer(serializers.ModelSerializer):
    version = serializers.CharField(source="version.ref", read_only=True)
    previous = serializers.CharField(source="previous.ref", read_only=True, default=None)

    class Meta:
        model = DataCheck
        fields = [
            "id", "monitor", "version", "previous", "created_at", "changed_percent", "features", "score", "drifted",
            "triggered", "message",
        ]  # fmt: skip
        read_only_fields = fields


class RetrainingSerializer(serializers.ModelSerializer):
    dataset_version = serializers.CharField(source="dataset_version.ref", read_only=True, default=None)

    class Meta:
        model = Retraining
        fields = ["id", "project", "policy", "reason", "detail", "dataset_version", "run", "status", "message",
                  "created_at"]  # fmt: skip
        read_only_fields = fields


class PromotionDecisionSerializer(serializers.ModelSerializer):
    """A gate's decision with both metrics; `basis` says where the champion's value comes from (`same_split`: the
    challenger's run scored it on the same test split; `own_run`: its own run's value); `previous` is where the alias
    pointed before a promotion moved it."""

    registered_model = serializers.CharField(source="registered_model.name", read_only=True)
    challenger = serializers.IntegerField(source="challenger.version", read_only=True)
    champion = serializers.IntegerField(source="champion.version", read_only=True, default=None)
    previous = serializers.IntegerField(source="previous.version", read_only=True, default=None)
    decided_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    rolled_back_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    can_roll_back = serializers.BooleanField(read_only=True)

    class Meta:
        model = PromotionDecision
        fields = [
            "id", "project", "policy", "retraining", "registered_model", "alias", "challenger", "champion", "metric",
            "challenger_value", "champion_value", "basis", "margin", "outcome", "message", "previous", "decided_by",
            "created_at", "decided_at", "rolled_back_at", "rolled_back_by", "can_roll_back",
        ]  # fmt: skip
        read_only_fields = fields
