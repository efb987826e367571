"""FilterSets of the projects app, and the base of every FilterSet of project-owned rows.

One FilterSet per list, shared by its page and its API list (docs/apps.md): the API's `DjangoFilterBackend` applies
`filterset_class`; a page builds the same FilterSet from `request.GET` and lists `filterset.qs`.
"""

from __future__ import annotations

from typing import ClassVar

import django_filters
import django_filters.rest_framework
from django.db.models import QuerySet
from django.utils.translation import gettext_lazy as _

from apps.projects.models import Membership, Project, ProjectSecret
from portal.lib.forms import StyledForm
from portal.lib.listing import ListFilterSet


class ProjectScopedFilterSet(django_filters.rest_framework.FilterSet):
    """`?project=<slug>` on a list of project-owned rows: the rows of that project (none for a slug you cannot see,
    since the list is already the user's `for_user`). The path to the project is the model's `tenant_path` (the one
    `for_user` follows), or `project_path` for rows reached through another relation (clusters, through their
    bindings). Every project-scoped API list's FilterSet derives from this one (tests/projects/test_project_filter.py
    checks it). DRF's FilterSet: booleans read `true`/`false` and datetimes ISO 8601, as the API documents them."""

    project = django_filters.CharFilter(
        method="filter_project", label=_("Project"), help_text=_("Only the rows of this project (its slug).")
    )
    project_path: ClassVar[str | None] = None

    def filter_project(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        path = self.project_path or getattr(queryset.model, "tenant_path", "project")
        return queryset.filter(slug=value) if path == "pk" else queryset.filter(**{f"{path}__slug": value})


class ProjectScopedListFilterSet(ListFilterSet, ProjectScopedFilterSet):
    """A list that scales (portal/lib/listing.py): `?search=`, `?ordering=` and `?project=`, with a form a page
    renders (StyledForm)."""

    class Meta:
        form = StyledForm


class ProjectFilterSet(ProjectScopedFilterSet):
    name = django_filters.CharFilter(lookup_expr="icontains")

    class Meta:
        model = Project
        fields = ["project", "slug", "name"]


class MembershipFilterSet(ProjectScopedFilterSet):
    user = django_filters.CharFilter(field_name="user__username")

    class Meta:
        model = Membership
        fields = ["project", "user"]


class ProjectSecretFilterSet(ProjectScopedFilterSet):
    name = django_filters.CharFilter(lookup_expr="icontains")

    class Meta:
        model = ProjectSecret
        fields = ["project", "name"]
