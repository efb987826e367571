"""The project storage quota (`Quota.storage_bytes`) counts everything a project stores, whichever app stores it:
dataset files (apps/datasets/quota.py) and tracking artifacts (apps/models/artifacts.py). Each app registers how it
measures a project's share (from its AppConfig.ready(), so that this app imports none of them)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from django.template.defaultfilters import filesizeformat
from django.utils.translation import gettext as _

from apps.projects.models import Quota

_usage: dict[str, Callable[[Any], int]] = {}


def register_usage(name: str, measure: Callable[[Any], int]) -> None:
    """`measure(project)`: the bytes the project stores in what app `name` keeps."""
    _usage[name] = measure


def used_bytes(project: Any, *, exclude: Iterable[str] = ()) -> int:
    """The bytes the project stores, over every registered app but those in `exclude` (which count themselves)."""
    skip = set(exclude)
    return sum(measure(project) for name, measure in _usage.items() if name not in skip)


def over_quota_message(slug: str, need: int | None, used: int, limit: int) -> str:
    """The sentence a refused write answers with (`need` None: not known before it was read)."""
    values = {
        "need": filesizeformat(need) if need is not None else _("more"),
        "project": slug,
        "left": filesizeformat(max(limit - used, 0)),
        "limit": filesizeformat(limit),
        "used": filesizeformat(used),
    }
    return (
        _(
            "Storage quota exceeded: this needs %(need)s but project “%(project)s” has %(left)s left of its "
            "%(limit)s quota (%(used)s in use). Delete old versions or artifacts, or ask an admin to raise it."
        )
        % values
    )


def storage_limit(project: Any) -> int | None:
    """The project's storage quota in bytes, None when it has none."""
    return Quota.objects.filter(project=project).values_list("storage_bytes", flat=True).first()
