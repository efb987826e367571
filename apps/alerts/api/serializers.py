from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from rest_framework import serializers

from apps.alerts.models import AlertEvent, AlertRule, Channel, Delivery
from apps.projects.api.serializers import StrictModelSerializer, VisibleProjectField


class ChannelSerializer(StrictModelSerializer):
    """A channel. Its webhook URL and signing secret are write-only (stored encrypted, never returned); changing a
    channel without them keeps the stored ones. The kind is fixed once created."""

    project = VisibleProjectField()
    url = serializers.CharField(required=False, write_only=True, allow_blank=True, help_text=_("Write-only."))
    secret = serializers.CharField(
        required=False, write_only=True, allow_blank=True, trim_whitespace=False, help_text=_("Write-only.")
    )
    kind = serializers.CharField()
    has_url = serializers.SerializerMethodField()
    has_secret = serializers.SerializerMethodField()
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = Channel
        fields = [
            "id", "project", "name", "kind", "recipients", "url", "secret", "has_url", "has_secret", "enabled",
            "created_by", "created_at", "updated_at",
        ]  # fmt: skip
        read_only_fields = ["id", "created_by", "created_at", "updated_at"]
        extra_kwargs = {"name": {"validators": []}, "recipients": {"required": False}}
        validators: list = []

    def get_has_url(self, channel: Channel) -> bool:
        return bool(channel.url)

    def get_has_secret(self, channel: Channel) -> bool:
        return bool(channel.secret)

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        if self.instance is not None and not isinstance(self.instance, list):
            fields["project"].read_only = True
            fields["kind"].read_only = True
        return fields


class IdListField(serializers.ListField):
    """Ids in, ids out (a related manager read back as its sorted primary keys)."""

    child = serializers.IntegerField()

    def to_representation(self, data: Any) -> list[int]:
        return sorted(c.pk for c in data.all()) if hasattr(data, "all") else super().to_representation(data)


class AlertRuleSerializer(StrictModelSerializer):
    """A rule: `kind` from GET /api/v1/alert-rules/kinds/ and its `params`; `channels` are ids of the project's
    channels."""

    project = VisibleProjectField()
    kind = serializers.CharField()
    params = serializers.JSONField(required=False)
    channels = IdListField(required=False)
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    firing = serializers.SerializerMethodField()

    class Meta:
        model = AlertRule
        fields = [
            "id", "project", "name", "kind", "params", "channels", "enabled", "firing", "created_by", "created_at",
            "updated_at", "last_evaluated_at",
        ]  # fmt: skip
        read_only_fields = ["id", "created_by", "created_at", "updated_at", "last_evaluated_at"]
        extra_kwargs = {"name": {"validators": []}}
        validators: list = []

    def get_firing(self, rule: AlertRule) -> int:
        return sum(1 for e in rule.events.all() if e.status == AlertEvent.Status.FIRING)

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        if self.instance is not None and not isinstance(self.instance, list):
            fields["project"].read_only = True
        return fields


class AlertEventSerializer(serializers.ModelSerializer):
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    rule = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = AlertEvent
        fields = [
            "id", "project", "rule", "key", "status", "subject", "message", "resolve_message", "value", "url", "count",
            "started_at", "last_seen_at", "resolved_at",
        ]  # fmt: skip
        read_only_fields = fields


class DeliverySerializer(serializers.ModelSerializer):
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    channel = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = Delivery
        fields = ["id", "project", "channel", "event", "kind", "status", "attempts", "error", "created_at", "sent_at"]
        read_only_fields = fields


class KindParamSerializer(serializers.Serializer):
    """One parameter of a rule kind (what the rule's `params` may hold)."""

    name = serializers.CharField()
    label = serializers.CharField()
    type = serializers.CharField()
    required = serializers.BooleanField()
    default = serializers.JSONField(allow_null=True)
    min = serializers.FloatField(allow_null=True)
    max = serializers.FloatField(allow_null=True)


class KindSerializer(serializers.Serializer):
    """A rule kind: what fires it (an event, or a threshold checked on a schedule) and its parameters."""

    name = serializers.CharField()
    label = serializers.CharField()
    description = serializers.CharField()
    trigger = serializers.ChoiceField(choices=["event", "threshold"])
    params = KindParamSerializer(many=True)
