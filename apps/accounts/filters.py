"""FilterSets of the accounts app: a user's own API tokens and notifications (no project scope: both are the user's)."""

from __future__ import annotations

import django_filters.rest_framework

from apps.accounts.models import ApiToken, Notification


class ApiTokenFilterSet(django_filters.rest_framework.FilterSet):
    class Meta:
        model = ApiToken
        fields = ["scope"]


class NotificationFilterSet(django_filters.rest_framework.FilterSet):
    class Meta:
        model = Notification
        fields = {"read_at": ["isnull"]}
