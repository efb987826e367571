"""FilterSets shared by the cluster pages and the API: one definition of what a list can be filtered by."""

from __future__ import annotations

import django_filters
from django.db.models import Q, QuerySet
from django.utils.translation import gettext_lazy as _

from apps.projects.filters import ProjectScopedFilterSet
from apps.runtime.models import Cluster, ProjectCluster


class ClusterFilterSet(ProjectScopedFilterSet):
    q = django_filters.CharFilter(label=_("Search"), method="search")
    enabled = django_filters.BooleanFilter(label=_("Enabled"))
    project_path = "bindings__project"  # `?project=<slug>`: the clusters bound to that project

    class Meta:
        model = Cluster
        fields = ["q", "enabled", "project"]

    def search(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        return queryset.filter(Q(name__icontains=value) | Q(description__icontains=value))


class ProjectClusterFilterSet(ProjectScopedFilterSet):
    cluster = django_filters.CharFilter(field_name="cluster__name", label=_("Cluster"))
    is_default = django_filters.BooleanFilter()

    class Meta:
        model = ProjectCluster
        fields = ["project", "cluster", "is_default"]
