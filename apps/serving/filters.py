"""FilterSets of services and revisions (the API's lists; `?project=<slug>&status=ready`, `?service=<id>`)."""

from __future__ import annotations

import django_filters
from django.utils.translation import gettext_lazy as _

from apps.serving.models import InferenceService, Revision


class InferenceServiceFilterSet(django_filters.FilterSet):
    project = django_filters.CharFilter(field_name="project__slug", label=_("Project"))

    class Meta:
        model = InferenceService
        fields = ["project", "status", "stage", "framework"]


class RevisionFilterSet(django_filters.FilterSet):
    project = django_filters.CharFilter(field_name="service__project__slug", label=_("Project"))

    class Meta:
        model = Revision
        fields = ["project", "service", "status"]
