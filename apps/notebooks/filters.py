"""The notebook FilterSet (the API's list; `?project=<slug>&owner=<username>&status=running`)."""

from __future__ import annotations

import django_filters
from django import forms
from django.utils.translation import gettext_lazy as _

from apps.notebooks.models import Notebook
from apps.projects.filters import ProjectScopedListFilterSet
from portal.lib.listing import sort_by


class NotebookFilterSet(ProjectScopedListFilterSet):
    search_fields = ("name", "owner__username")
    owner = django_filters.CharFilter(
        field_name="owner__username", label=_("Owner"), widget=forms.TextInput(attrs={"placeholder": _("Owner")})
    )
    ordering = sort_by("name", "created_at", "last_activity", "status")

    class Meta(ProjectScopedListFilterSet.Meta):
        model = Notebook
        fields = ["project", "search", "owner", "status", "ide", "ordering"]
