"""FilterSets of the accounts app: a user's own API tokens and notifications (no project scope: both are the user's)."""

from __future__ import annotations

import django_filters.rest_framework
from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from apps.accounts.models import ApiToken, Notification
from portal.lib.forms import StyledForm
from portal.lib.listing import ListFilterSet, sort_by

TOKEN_STATES = [("active", _("Active")), ("revoked", _("Revoked")), ("expired", _("Expired"))]


class ApiTokenFilterSet(ListFilterSet):
    """The tokens page and `/api/v1/tokens/`. The page asks for `kind=personal&state=active` unless told otherwise
    (accounts.views.TOKEN_DEFAULTS): the tokens the platform mints for each task attempt and notebook, and revoked
    ones, would otherwise bury the few a person made."""

    search_fields = ("name", "prefix")
    kind = django_filters.ChoiceFilter(choices=ApiToken.Kind.choices, label=_("Kind"), empty_label=_("Any kind"))
    state = django_filters.ChoiceFilter(
        choices=TOKEN_STATES, method="filter_state", label=_("State"), empty_label=_("Any state")
    )
    ordering = sort_by("name", "created_at", "expires_at", "last_used_at")

    class Meta:
        model = ApiToken
        fields = ["search", "scope", "kind", "state", "ordering"]
        form = StyledForm

    def filter_state(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        if value == "revoked":
            return queryset.filter(revoked_at__isnull=False)
        expired = Q(expires_at__isnull=False, expires_at__lte=timezone.now())
        if value == "expired":
            return queryset.filter(expired, revoked_at__isnull=True)
        return queryset.active()


class NotificationFilterSet(django_filters.rest_framework.FilterSet):
    class Meta:
        model = Notification
        fields = {"read_at": ["isnull"]}
