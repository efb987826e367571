"""FilterSets of services and revisions (the API's lists; `?project=<slug>&status=ready`, `?service=<id>`)."""

from __future__ import annotations

from apps.projects.filters import ProjectScopedFilterSet
from apps.serving.models import InferenceService, Revision


class InferenceServiceFilterSet(ProjectScopedFilterSet):
    class Meta:
        model = InferenceService
        fields = ["project", "status", "stage", "framework"]


class RevisionFilterSet(ProjectScopedFilterSet):
    class Meta:
        model = Revision
        fields = ["project", "service", "status"]
