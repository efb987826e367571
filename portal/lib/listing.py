"""Lists that scale: the search box and the sort order every list's FilterSet shares with its API list, and the
page's half (filter, sort, one page of rows; a bad value is a form error and a 400, never a 500).

A list's FilterSet derives from `ListFilterSet`, names the fields its `search` box looks in (`search_fields`) and
declares `ordering = sort_by(...)` with the columns a person may sort by. The API reads the same `?search=` and
`?ordering=` through `DjangoFilterBackend` (an unknown column is a 400 with the field's message); the page renders
`templates/includes/list_toolbar.html` and column headers from `{% sort_header %}`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import django_filters
import django_filters.rest_framework
from django import forms
from django.core.paginator import Page, Paginator
from django.db.models import Q, QuerySet
from django.http import HttpRequest, QueryDict
from django.utils.translation import gettext_lazy as _

PAGE_SIZE = 25
MAX_SEARCH_WORDS = 8  # each word is one more OR across the fields: bound the query a box can build


def sort_by(*fields: str) -> django_filters.OrderingFilter:
    """`?ordering=<field>` or `-<field>` over these model fields (the column headers link to them)."""
    return django_filters.OrderingFilter(fields=[(f, f) for f in fields], label=_("Sort by"))


class IdFilter(django_filters.NumberFilter):
    """`?<name>=<id>`: a whole number a primary key can hold (a fraction or 10**30 is the field's 400, never an
    overflow in the database driver)."""

    field_class = forms.IntegerField

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("min_value", 1)
        kwargs.setdefault("max_value", 2**63 - 1)
        super().__init__(*args, **kwargs)


class ListFilterSet(django_filters.rest_framework.FilterSet):
    """`?search=` (every word, in any of `search_fields`, case-insensitive) on top of a list's own filters."""

    search = django_filters.CharFilter(method="filter_search", label=_("Search"), max_length=200)
    search_fields: ClassVar[tuple[str, ...]] = ()

    def filter_search(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        for word in value.split()[:MAX_SEARCH_WORDS]:
            anywhere = Q()
            for field in self.search_fields:
                anywhere |= Q(**{f"{field}__icontains": word})
            queryset = queryset.filter(anywhere)
        return queryset


@dataclass
class Listing:
    """What a list page renders: the FilterSet's form (errors included), one page of rows, the query string."""

    filterset: Any
    page: Page
    query: QueryDict  # the request's, with the defaults it did not override: what links to other pages keep
    filtered: bool  # whether the person narrowed the list (an empty list then says "no match", not "none yet")

    @property
    def form(self) -> Any:
        return self.filterset.form

    @property
    def status(self) -> int:
        return 400 if self.filterset.form.errors else 200


def listing(
    request: HttpRequest,
    filterset_class: type,
    queryset: QuerySet,
    *,
    defaults: dict[str, str] | None = None,
    per_page: int = PAGE_SIZE,
) -> Listing:
    """Filter, sort and page `queryset` (already the user's) by the request's query string. An invalid value leaves
    the list empty and puts the message on the form (the caller answers with `listing.status`, 400). `defaults`
    fill parameters the query string does not name at all (an empty value is a choice: 'any')."""
    query = request.GET.copy()
    for name, value in (defaults or {}).items():
        query.setdefault(name, value)
    filterset = filterset_class(query, queryset=queryset, request=request)
    filterset.form.auto_id = "list-%s"  # apart from the ids of a form on the same page (the new token's scope)
    for name, field in filterset.form.fields.items():
        if field.label is None and name in filterset.filters:
            # A filter whose form field was first built without the model (drf-spectacular reads the class's filters
            # for the schema) keeps a field without a label: the instance's filter knows it.
            field.label = filterset.filters[name].label
        if isinstance(field.widget, forms.Select):
            field.widget.attrs["data-autosubmit"] = ""  # static/js/portal.js submits the toolbar on change
            if str(getattr(field, "empty_label", None) or "x").strip("-") == "":
                # django-filter's "---------": the select's label is hidden, so its empty choice names it.
                field.empty_label = _("%(field)s: any") % {"field": field.label}
                # The widget iterates a copy made for the form's class: give it choices that read this field.
                field.choices = getattr(field.choices, "choices", field.choices)
    rows = filterset.qs if filterset.is_valid() else queryset.none()
    page = Paginator(rows, per_page).get_page(request.GET.get("page"))
    narrowed = any(request.GET.get(name) for name in filterset.form.fields if name != "ordering")
    return Listing(filterset=filterset, page=page, query=query, filtered=narrowed)


@dataclass
class Pages:
    """One page of a plain list without a FilterSet (a model's or a dataset's versions), for
    `includes/list_pages.html`: the page and the query string its links keep."""

    page: Page
    query: QueryDict


def paged(request: HttpRequest, queryset: QuerySet, *, per_page: int = PAGE_SIZE) -> Pages:
    """Page `queryset` by `?page=`, so a detail page's list costs the same however long it grows."""
    return Pages(page=Paginator(queryset, per_page).get_page(request.GET.get("page")), query=request.GET.copy())
