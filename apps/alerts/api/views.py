from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from apps.alerts import services
from apps.alerts.api.serializers import (
    AlertEventSerializer,
    AlertRuleSerializer,
    ChannelSerializer,
    DeliverySerializer,
    KindSerializer,
)
from apps.alerts.filters import AlertEventFilterSet, AlertRuleFilterSet, ChannelFilterSet, DeliveryFilterSet
from apps.alerts.kinds import KINDS
from apps.alerts.models import AlertEvent, AlertRule, Channel, Delivery
from apps.projects.api.base import ProjectScopedGenericViewSet, ProjectScopedViewSet
from apps.projects.permissions import CONTRIBUTE, VIEW

CHANNEL_FIELDS = ("name", "recipients", "url", "secret", "enabled")
RULE_FIELDS = ("name", "kind", "params", "channels", "enabled")


class ChannelViewSet(ProjectScopedViewSet):
    """Alert channels of your projects: in-app, email, generic/Slack/WeCom/DingTalk webhooks. `test` sends a test
    message (queued; its delivery row says how it went)."""

    queryset = Channel.objects.select_related("project", "created_by")
    serializer_class = ChannelSerializer
    filterset_class = ChannelFilterSet
    search_fields = ["name"]
    ordering_fields = ["name", "created_at"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]
    action_perms = {"test": CONTRIBUTE}

    def perform_create(self, serializer: ChannelSerializer) -> None:
        data = serializer.validated_data
        self.check_project(data["project"])
        fields = {k: data[k] for k in CHANNEL_FIELDS if k in data}
        serializer.instance = services.create_channel(data["project"], self.request.user, kind=data["kind"], **fields)

    def perform_update(self, serializer: ChannelSerializer) -> None:
        data = serializer.validated_data
        fields = {k: data[k] for k in CHANNEL_FIELDS if k in data}
        serializer.instance = services.update_channel(serializer.instance, **fields)

    def perform_destroy(self, instance: Channel) -> None:
        services.delete_channel(instance)

    @extend_schema(request=None, responses={202: DeliverySerializer})
    @action(detail=True, methods=["post"])
    def test(self, request: Request, pk: str | None = None) -> Response:
        """Queue a test message to this channel."""
        delivery = services.send_test(self.get_object())
        return Response(DeliverySerializer(delivery).data, status=status.HTTP_202_ACCEPTED)


class AlertRuleViewSet(ProjectScopedViewSet):
    """Alert rules of your projects. `kinds` lists the rule kinds and their parameters."""

    queryset = AlertRule.objects.select_related("project", "created_by").prefetch_related("channels", "events")
    serializer_class = AlertRuleSerializer
    filterset_class = AlertRuleFilterSet
    search_fields = ["name"]
    ordering_fields = ["name", "created_at"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def perform_create(self, serializer: AlertRuleSerializer) -> None:
        data = serializer.validated_data
        self.check_project(data["project"])
        fields = {k: data[k] for k in RULE_FIELDS if k in data}
        serializer.instance = services.create_rule(data["project"], self.request.user, **fields)

    def perform_update(self, serializer: AlertRuleSerializer) -> None:
        data = serializer.validated_data
        fields = {k: data[k] for k in RULE_FIELDS if k in data}
        serializer.instance = services.update_rule(serializer.instance, **fields)

    def perform_destroy(self, instance: AlertRule) -> None:
        services.delete_rule(instance)

    @extend_schema(responses={200: KindSerializer(many=True)})
    @action(detail=False, methods=["get"], pagination_class=None, filter_backends=[])
    def kinds(self, request: Request) -> Response:
        """The rule kinds: name, label, trigger (event or threshold) and parameters."""
        return Response(
            [
                {
                    "name": name, "label": str(kind.label), "description": str(kind.description),
                    "trigger": "threshold" if kind.is_threshold else "event",
                    "params": [
                        {"name": p.name, "label": str(p.label), "type": p.type,
                         "required": p.required and p.default is None, "default": p.default, "min": p.min,
                         "max": p.max}
                        for p in kind.params
                    ],
                }
                for name, kind in KINDS.items()
            ]
        )  # fmt: skip


class AlertEventViewSet(mixins.RetrieveModelMixin, mixins.ListModelMixin, ProjectScopedGenericViewSet):
    """What fired in your projects, newest first (`?status=firing`, `?rule=<name>`)."""

    queryset = AlertEvent.objects.select_related("project", "rule")
    serializer_class = AlertEventSerializer
    filterset_class = AlertEventFilterSet
    ordering_fields = ["started_at", "resolved_at"]
    action_perms = {"list": VIEW, "retrieve": VIEW}


class DeliveryViewSet(mixins.RetrieveModelMixin, mixins.ListModelMixin, ProjectScopedGenericViewSet):
    """Messages sent (or not) to your projects' channels: status, attempts and the last error."""

    queryset = Delivery.objects.select_related("project", "channel")
    serializer_class = DeliverySerializer
    filterset_class = DeliveryFilterSet
    ordering_fields = ["created_at"]
