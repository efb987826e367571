from __future__ import annotations

from typing import Any

from django import template

register = template.Library()


@register.filter
def get_item(mapping: dict[str, Any], key: str) -> Any:
    return mapping.get(key, "") if mapping else ""


@register.filter
def seconds(value: float | None) -> str:
    """12.3 → "12.3 s", 125 → "2 min 5 s"."""
    if not isinstance(value, int | float):
        return "—"
    if value < 60:
        return f"{value:.1f} s"
    minutes, rest = divmod(int(value), 60)
    return f"{minutes} min {rest} s"
