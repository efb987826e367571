"""The one FilterSet of the audit log, shared by the page, its CSV export and the API."""

from __future__ import annotations

import django_filters
from django.utils.translation import gettext_lazy as _

from apps.audit.models import AuditEntry


class AuditEntryFilterSet(django_filters.FilterSet):
    actor = django_filters.CharFilter(field_name="actor_repr", label=_("Actor"))
    action = django_filters.CharFilter(label=_("Action"))
    object_type = django_filters.CharFilter(label=_("Object type"))
    project = django_filters.CharFilter(field_name="project__slug", label=_("Project"))
    since = django_filters.DateFilter(field_name="created_at", lookup_expr="date__gte", label=_("From"))
    until = django_filters.DateFilter(field_name="created_at", lookup_expr="date__lte", label=_("To"))

    class Meta:
        model = AuditEntry
        fields = ["actor", "action", "object_type", "project", "since", "until"]
