"""The monitor and report FilterSets (`?project=<slug>&enabled=true`; a monitor's reports `?status=drifted`)."""

from __future__ import annotations

import django_filters

from apps.monitoring.models import DriftMonitor, DriftReport
from apps.projects.filters import ProjectScopedFilterSet


class DriftMonitorFilterSet(ProjectScopedFilterSet):
    service = django_filters.CharFilter(field_name="service__name")

    class Meta:
        model = DriftMonitor
        fields = ["project", "service", "enabled"]


class DriftReportFilterSet(ProjectScopedFilterSet):
    class Meta:
        model = DriftReport
        fields = ["project", "monitor", "status"]
