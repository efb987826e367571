"""One FilterSet per list, shared by the pages and the API (`?project=<slug>&kind=…&status=firing`)."""

from __future__ import annotations

import django_filters

from apps.alerts.models import AlertEvent, AlertRule, Channel, Delivery
from apps.projects.filters import ProjectScopedFilterSet
from portal.lib.forms import StyledForm
from portal.lib.listing import IdFilter


class ChannelFilterSet(ProjectScopedFilterSet):
    class Meta:
        model = Channel
        fields = ["project", "kind", "enabled"]


class AlertRuleFilterSet(ProjectScopedFilterSet):
    class Meta:
        model = AlertRule
        fields = ["project", "kind", "enabled"]


class AlertEventFilterSet(ProjectScopedFilterSet):
    rule = django_filters.CharFilter(field_name="rule__name", label="rule")

    class Meta:
        model = AlertEvent
        fields = ["project", "status", "rule"]
        form = StyledForm


class DeliveryFilterSet(ProjectScopedFilterSet):
    # Plain ids: a choice filter would answer "not a valid choice" only for ids that exist nowhere.
    channel = IdFilter(field_name="channel_id")
    event = IdFilter(field_name="event_id")

    class Meta:
        model = Delivery
        fields = ["project", "status", "kind", "channel", "event"]
