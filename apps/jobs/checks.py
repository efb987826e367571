"""System checks of the queue's settings (docs/scheduling.md): a misspelt policy or a malformed number is an error at
`manage.py check` (and every command that runs checks), not a queue that silently does something else."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, register

from apps.jobs.queue_policy import POLICIES


@register()
def check_queue_settings(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    errors = []
    policy = getattr(settings, "PORTAL_QUEUE_POLICY", "greedy")
    if policy not in POLICIES:
        errors.append(
            Error(
                f"PORTAL_QUEUE_POLICY must be one of {', '.join(repr(p) for p in POLICIES)}; got {policy!r}.",
                hint="Unset it for the default ('greedy'); docs/scheduling.md compares the two.",
                id="jobs.E001",
            )
        )
    if not isinstance(getattr(settings, "PORTAL_QUEUE_BORROWING", False), bool):
        errors.append(Error("PORTAL_QUEUE_BORROWING must be True or False.", id="jobs.E003"))
    if not isinstance(getattr(settings, "PORTAL_QUEUE_FAIR_SHARE", True), bool):
        errors.append(Error("PORTAL_QUEUE_FAIR_SHARE must be True or False.", id="jobs.E004"))
    # name → the least value that makes sense: aging every 0 s means "never", an estimate must be a positive time.
    for name, least in (
        ("PORTAL_QUEUE_AGING_SECONDS", 0),
        ("PORTAL_QUEUE_AGING_MAX", 0),
        ("PORTAL_QUEUE_DEFAULT_ESTIMATE", 1),
    ):
        value = getattr(settings, name, None)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            errors.append(
                Error(
                    f"{name} must be a whole number of at least {least}; got {value!r}.",
                    id="jobs.E002",
                )
            )
    return errors
