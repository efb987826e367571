"""FilterSets of the datasets app: one per list, shared by its page and its API list (docs/apps.md)."""

from __future__ import annotations

import django_filters
from django import forms
from django.utils.translation import gettext_lazy as _

from apps.datasets.models import Dataset, DatasetVersion, UploadFile, UploadSession
from apps.projects.filters import ProjectScopedFilterSet, ProjectScopedListFilterSet
from portal.lib.listing import sort_by


def _text(placeholder: str) -> forms.TextInput:
    return forms.TextInput(attrs={"placeholder": placeholder})


class DatasetFilterSet(ProjectScopedListFilterSet):
    search_fields = ("name", "description", "source", "licence")
    licence = django_filters.CharFilter(lookup_expr="iexact", label=_("Licence"), widget=_text(_("Licence")))
    ordering = sort_by("name", "created_at")

    class Meta(ProjectScopedListFilterSet.Meta):
        model = Dataset
        fields = ["project", "name", "search", "licence", "ordering"]


class DatasetVersionFilterSet(ProjectScopedFilterSet):
    class Meta:
        model = DatasetVersion
        fields = ["project", "dataset", "number", "digest"]


class UploadSessionFilterSet(ProjectScopedFilterSet):
    class Meta:
        model = UploadSession
        fields = ["project", "dataset", "status"]


class UploadFileFilterSet(ProjectScopedFilterSet):
    class Meta:
        model = UploadFile
        fields = ["project", "session"]
