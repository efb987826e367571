"""Template tags of every list page (portal/lib/listing.py): column headers that sort, and links to other pages
that keep the search, the filters and the sort order."""

from __future__ import annotations

from django import template
from django.http import QueryDict
from django.utils.html import format_html
from django.utils.translation import gettext as _

register = template.Library()


def _query(query: QueryDict, **changes: str | None) -> str:
    query = query.copy()
    for name, value in changes.items():
        if value is None:
            query.pop(name, None)
        else:
            query[name] = value
    return "?" + query.urlencode() if query else "?"


@register.simple_tag
def page_url(listing, number: int) -> str:
    """The list's page `number`, with the same search, filters and order."""
    return _query(listing.query, page=str(number))


@register.simple_tag
def sort_header(listing, field: str, label: str) -> str:
    """A column header that sorts by `field` (ascending first, then descending), back on the first page, with the
    search and filters kept; it says which way the list is sorted now (aria-sort)."""
    current = listing.query.get("ordering", "")
    if current == field:
        target, arrow, aria = f"-{field}", "▲", "ascending"
    elif current == f"-{field}":
        target, arrow, aria = field, "▼", "descending"
    else:
        target, arrow, aria = field, "", "none"
    title = _("Sort by %(column)s") % {"column": label}
    return format_html(
        '<th scope="col" aria-sort="{}"><a class="link-body-emphasis text-decoration-none" href="{}" title="{}" '
        'data-sort="{}">{}{}</a></th>',
        aria,
        _query(listing.query, ordering=target, page=None),
        title,
        field,
        label,
        format_html(' <span aria-hidden="true">{}</span>', arrow) if arrow else "",
    )
