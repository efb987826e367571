"""Alert rows for tests: channels and rules made through the services (as the pages and the API make them)."""

from __future__ import annotations

import itertools
from typing import Any

from apps.alerts import services
from apps.alerts.models import AlertRule, Channel

_names = itertools.count()


def channel(project: Any, owner: Any = None, kind: str = Channel.Kind.INAPP, **fields: Any) -> Channel:
    fields.setdefault("name", f"ch-{next(_names)}")
    if kind in Channel.WEBHOOKS:
        fields.setdefault("url", "http://127.0.0.1:9/hook")
    return services.create_channel(project, owner, kind=kind, **fields)


def rule(project: Any, owner: Any = None, kind: str = "run_failed", params: dict | None = None,
         channels: list | None = None, **fields: Any) -> AlertRule:  # fmt: skip
    fields.setdefault("name", f"rule-{next(_names)}")
    if channels is None:
        channels = [channel(project, owner)]
    return services.create_rule(project, owner, kind=kind, params=params or {}, channels=channels, **fields)
