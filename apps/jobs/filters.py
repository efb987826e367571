"""FilterSets of the jobs app: one per list, shared by its page and its API list (docs/apps.md)."""

from __future__ import annotations

import django_filters
from django import forms
from django.db.models import Q, QuerySet
from django.utils.translation import gettext_lazy as _

from apps.jobs.diagnosis import cause_choices
from apps.jobs.models import RUN_TRIGGERS, Image, JobTemplate, Pipeline, PipelineRun, RunStatus, Schedule, TaskRun
from apps.projects.filters import ProjectScopedFilterSet, ProjectScopedListFilterSet
from portal.lib.listing import sort_by


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


class PipelineFilterSet(ProjectScopedListFilterSet):
    search_fields = ("name", "description")
    ordering = sort_by("name", "created_at", "updated_at")

    class Meta(ProjectScopedListFilterSet.Meta):
        model = Pipeline
        fields = ["project", "name", "search", "ordering"]


class PipelineRunFilterSet(ProjectScopedListFilterSet):
    search_fields = ("pipeline_name",)
    ordering = sort_by("number", "pipeline_name", "status", "created_at", "started_at")

    class Meta(ProjectScopedListFilterSet.Meta):
        model = PipelineRun
        fields = ["project", "search", "status", "pipeline", "trigger", "schedule", "ordering"]


class RunListFilterSet(PipelineRunFilterSet):
    """The run list page's: the API's filters, except that `pipeline` is a part of the pipeline's name (what a person
    types in the page's box) where the API takes the pipeline's id."""

    status = django_filters.ChoiceFilter(label=_("Status"), choices=RunStatus.choices, empty_label=_("Any status"))
    pipeline = django_filters.CharFilter(
        field_name="pipeline_name",
        lookup_expr="icontains",
        label=_("Pipeline"),
        widget=forms.TextInput(attrs={"placeholder": _("Pipeline")}),
    )
    trigger = django_filters.ChoiceFilter(
        label=_("Trigger"), choices=list(RUN_TRIGGERS.items()), empty_label=_("Any trigger")
    )

    class Meta(PipelineRunFilterSet.Meta):
        fields = ["search", "status", "pipeline", "trigger", "ordering"]


class TaskRunFilterSet(ProjectScopedFilterSet):
    cause = django_filters.ChoiceFilter(
        field_name="failure_cause", choices=cause_choices, label=_("Diagnosed cause of its failure")
    )

    class Meta:
        model = TaskRun
        fields = ["project", "run", "node", "status", "cause"]


class ScheduleFilterSet(ProjectScopedFilterSet):
    class Meta:
        model = Schedule
        fields = ["project", "pipeline", "enabled"]
