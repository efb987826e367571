"""FilterSets of services and revisions (the API's lists; `?project=<slug>&status=ready`, `?service=<id>`)."""

from __future__ import annotations

from apps.projects.filters import ProjectScopedFilterSet, ProjectScopedListFilterSet
from apps.serving.models import InferenceService, Revision
from portal.lib.listing import sort_by


class InferenceServiceFilterSet(ProjectScopedListFilterSet):
    search_fields = ("name", "description")
    ordering = sort_by("name", "created_at", "updated_at", "status")

    class Meta(ProjectScopedListFilterSet.Meta):
        model = InferenceService
        fields = ["project", "search", "status", "stage", "framework", "ordering"]


class RevisionFilterSet(ProjectScopedFilterSet):
    class Meta:
        model = Revision
        fields = ["project", "service", "status"]
