"""The catalogue's and the installations' FilterSets, shared by the pages and the API."""

from __future__ import annotations

import json

import django_filters
from django.db.models import Q, QuerySet
from django.utils.translation import gettext_lazy as _

from apps.appstore.models import App, Installation
from apps.projects.filters import ProjectScopedFilterSet
from portal.lib.forms import StyledForm


class AppFilterSet(django_filters.FilterSet):
    """`?q=` (name, title, summary, tags), `?category=`, `?tag=`: read from each app's newest version."""

    q = django_filters.CharFilter(method="search", label=_("Search"))
    category = django_filters.CharFilter(method="by_category", label=_("Category"))
    tag = django_filters.CharFilter(method="by_tag", label=_("Tag"))

    class Meta:
        model = App
        fields = ["q", "category", "tag"]
        form = StyledForm

    def search(self, queryset: QuerySet[App], name: str, value: str) -> QuerySet[App]:
        words = Q(name__icontains=value) | Q(versions__manifest__metadata__title__icontains=value)
        words |= Q(versions__manifest__metadata__summary__icontains=value)
        words |= Q(versions__manifest__metadata__tags__icontains=value)
        return queryset.filter(words).distinct()

    def by_category(self, queryset: QuerySet[App], name: str, value: str) -> QuerySet[App]:
        return queryset.filter(versions__manifest__metadata__category=value).distinct()

    def by_tag(self, queryset: QuerySet[App], name: str, value: str) -> QuerySet[App]:
        # The tags' JSON text holds the tag quoted: portable (SQLite has no JSON containment) and exact per tag.
        quoted = json.dumps(value)
        return queryset.filter(versions__manifest__metadata__tags__icontains=quoted).distinct()


class InstallationFilterSet(ProjectScopedFilterSet):
    app = django_filters.CharFilter(field_name="app_version__app__name", label=_("App"))

    class Meta:
        model = Installation
        fields = ["project", "app"]
