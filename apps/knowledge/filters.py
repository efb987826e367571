"""FilterSets of knowledge bases and documents (the API lists and the pages)."""

from __future__ import annotations

import django_filters
from django.db.models import QuerySet
from django.utils.translation import gettext_lazy as _

from apps.knowledge.models import Document, KnowledgeBase
from apps.projects.filters import ProjectScopedFilterSet
from portal.lib.listing import IdFilter


class KnowledgeBaseFilterSet(ProjectScopedFilterSet):
    """`?project=<slug>`: the bases owned by that project."""

    name = django_filters.CharFilter(lookup_expr="icontains")

    class Meta:
        model = KnowledgeBase
        fields = ["project", "name"]


class DocumentFilterSet(ProjectScopedFilterSet):
    knowledge_base = IdFilter(field_name="knowledge_base_id", label=_("Knowledge base"))
    name = django_filters.CharFilter(lookup_expr="icontains")
    tag = django_filters.CharFilter(method="filter_tag", label=_("Tag"))

    class Meta:
        model = Document
        fields = ["project", "knowledge_base", "name", "status", "kind"]

    def filter_tag(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        # JSON containment is not portable (SQLite has none); tags are few per document.
        return queryset.filter(pk__in=[pk for pk, tags in queryset.values_list("pk", "tags") if value in tags])
