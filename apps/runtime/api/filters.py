"""FilterSets shared by the cluster pages and the API: one definition of what a list can be filtered by."""

from __future__ import annotations

import django_filters
from django.db.models import Q, QuerySet
from django.utils.translation import gettext_lazy as _

from apps.runtime.models import Cluster, ProjectCluster


class ClusterFilterSet(django_filters.FilterSet):
    q = django_filters.CharFilter(label=_("Search"), method="search")
    enabled = django_filters.BooleanFilter(label=_("Enabled"))

    class Meta:
        model = Cluster
        fields = ["q", "enabled"]

    def search(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        return queryset.filter(Q(name__icontains=value) | Q(description__icontains=value))


class ProjectClusterFilterSet(django_filters.FilterSet):
    project = django_filters.CharFilter(field_name="project__slug", label=_("Project"))
    cluster = django_filters.CharFilter(field_name="cluster__name", label=_("Cluster"))

    class Meta:
        model = ProjectCluster
        fields = ["project", "cluster", "is_default"]
