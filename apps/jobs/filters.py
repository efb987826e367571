"""FilterSets of the jobs app: one per list, shared by its page and its API list (docs/apps.md)."""

from __future__ import annotations

import django_filters
from django.db.models import Q, QuerySet
from django.utils.translation import gettext_lazy as _

from apps.jobs.models import Image, JobTemplate, Pipeline, PipelineRun, RunStatus, Schedule, TaskRun
from apps.projects.filters import ProjectScopedFilterSet
from portal.lib.forms import StyledForm


class JobTemplateFilterSet(ProjectScopedFilterSet):
    q = django_filters.CharFilter(method="search", label=_("Search"))  # the template list page's box

    class Meta:
        model = JobTemplate
        fields = ["project", "slug", "category", "kind", "framework", "q"]

    def search(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        value = value.strip()
        if not value:
            return queryset
        words = Q(slug__icontains=value) | Q(name__icontains=value)
        return queryset.filter(words | Q(category__icontains=value) | Q(description__icontains=value))


class ImageFilterSet(ProjectScopedFilterSet):
    class Meta:
        model = Image
        fields = ["project", "name"]


class PipelineFilterSet(ProjectScopedFilterSet):
    class Meta:
        model = Pipeline
        fields = ["project", "name"]


class PipelineRunFilterSet(ProjectScopedFilterSet):
    class Meta:
        model = PipelineRun
        fields = ["project", "status", "pipeline", "trigger", "schedule"]


class RunListFilterSet(PipelineRunFilterSet):
    """The run list page's: the API's filters, except that `pipeline` is a part of the pipeline's name (what a person
    types in the page's box) where the API takes the pipeline's id."""

    status = django_filters.ChoiceFilter(label=_("Status"), choices=RunStatus.choices, empty_label=_("Any status"))
    pipeline = django_filters.CharFilter(field_name="pipeline_name", lookup_expr="icontains", label=_("Pipeline"))

    class Meta(PipelineRunFilterSet.Meta):
        form = StyledForm


class TaskRunFilterSet(ProjectScopedFilterSet):
    class Meta:
        model = TaskRun
        fields = ["project", "run", "node", "status"]


class ScheduleFilterSet(ProjectScopedFilterSet):
    class Meta:
        model = Schedule
        fields = ["project", "pipeline", "enabled"]
