"""The notebook FilterSet (the API's list; `?project=<slug>&owner=<username>&status=running`)."""

from __future__ import annotations

import django_filters
from django.utils.translation import gettext_lazy as _

from apps.notebooks.models import Notebook
from apps.projects.filters import ProjectScopedFilterSet


class NotebookFilterSet(ProjectScopedFilterSet):
    owner = django_filters.CharFilter(field_name="owner__username", label=_("Owner"))

    class Meta:
        model = Notebook
        fields = ["project", "owner", "status", "ide"]
