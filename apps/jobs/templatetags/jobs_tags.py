from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import template
from django.utils.translation import gettext as _

from apps.jobs import reasons as _formats  # noqa: F401  (registers the shapes `reason` translates)
from portal.lib import reasons

register = template.Library()


@register.filter
def reason(text: str | None) -> str:
    """A stored waiting or failure reason in the viewer's language (portal/lib/reasons.py)."""
    return reasons.translate(text or "")


@register.filter
def get_item(mapping: dict[str, Any], key: str) -> Any:
    return mapping.get(key, "") if mapping else ""


@register.filter
def seconds(value: float | timedelta | None) -> str:
    """A duration in the viewer's language: 12.3 → "12.3 s", 125 → "2 min 5 s", 7300 → "2 h 1 min"."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if not isinstance(value, int | float):
        return "—"
    if value < 60:
        return _("%(s).1f s") % {"s": value}
    minutes, rest = divmod(int(value), 60)
    if minutes < 60:
        return _("%(m)d min %(s)d s") % {"m": minutes, "s": rest}
    hours, minutes = divmod(minutes, 60)
    return _("%(h)d h %(m)d min") % {"h": hours, "m": minutes}
