"""`{{ column|distribution }}`: a column's distribution on a version's page, drawn on the server — a histogram of a
numeric column as an inline SVG of bars, the most frequent values of any other as labelled bars — each bar with a
tooltip saying its range (or value) and count. No script, so it shows before any JavaScript runs and in print."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _

register = template.Library()

WIDTH, HEIGHT = 160, 32


def _number(value: float) -> str:
    return f"{value:.4g}"


def _histogram(histogram: dict[str, Any]) -> SafeString:
    counts, edges = histogram["counts"], histogram["edges"]
    peak = max(counts) or 1
    width = WIDTH / len(counts)
    bars = []
    for i, count in enumerate(counts):
        height = max(round(HEIGHT * count / peak, 1), 1 if count else 0)
        label = f"{_number(edges[i])} – {_number(edges[i + 1])}: {count}"
        bars.append((round(i * width, 2), round(HEIGHT - height, 1), round(max(width - 1, 1), 2), height, label))
    title = _("Histogram of a sample, scaled to every row") if histogram.get("sampled") else _("Histogram")
    return format_html(
        '<svg class="distribution" width="{}" height="{}" viewBox="0 0 {} {}" role="img" aria-label="{}">{}</svg>'
        '<div class="distribution-range"><span>{}</span><span>{}</span></div>',
        WIDTH,
        HEIGHT,
        WIDTH,
        HEIGHT,
        title,
        format_html_join(
            "",
            '<rect x="{}" y="{}" width="{}" height="{}"><title>{}</title></rect>',
            bars,
        ),
        _number(edges[0]),
        _number(edges[-1]),
    )


def _top(top: list[list[Any]], count: int) -> SafeString:
    total = count or 1
    return format_html(
        '<ul class="distribution-top list-unstyled mb-0" aria-label="{}">{}</ul>',
        _("Most frequent values"),
        format_html_join(
            "",
            '<li title="{}: {}"><span class="bar" style="width: {}%"></span><span class="value">{}</span> '
            '<span class="text-body-secondary">{}</span></li>',
            ((value, n, round(100 * n / total), value, n) for value, n in top[:5]),
        ),
    )


@register.filter
def distribution(column: dict[str, Any]) -> SafeString | str:
    if column.get("histogram"):
        return _histogram(column["histogram"])
    if column.get("top"):
        return _top(column["top"], column.get("count", 0) - column.get("nulls", 0))
    return "—"
