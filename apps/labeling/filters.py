"""The labeling project FilterSet (the API's list; `?project=<slug>&kind=ner&status=ready`)."""

from __future__ import annotations

from apps.labeling.models import LabelingProject
from apps.projects.filters import ProjectScopedFilterSet


class LabelingProjectFilterSet(ProjectScopedFilterSet):
    class Meta:
        model = LabelingProject
        fields = ["project", "kind", "status"]
