"""The study and trial FilterSets (`?project=<slug>&status=running`; a study's trials `?status=pruned`)."""

from __future__ import annotations

import django_filters

from apps.hpo.models import Study, Trial
from apps.projects.filters import ProjectScopedFilterSet


class StudyFilterSet(ProjectScopedFilterSet):
    class Meta:
        model = Study
        fields = ["project", "status", "algorithm"]


class TrialFilterSet(django_filters.FilterSet):
    class Meta:
        model = Trial
        fields = ["status"]
