"""The alert lifecycle: a condition fires once (one `AlertEvent`, one message per channel), later sightings only
count on that row, and when it clears the row is resolved and a "resolved" message goes out.

Kinds (apps/alerts/kinds.py) say what holds; this module never looks at a kind's own business. Threshold kinds
are evaluated by the beat (`evaluate_all`); event kinds hear of events through `handle_event`, which the tasks
queued by the apps' hooks call (apps/alerts/apps.py). Messages are `Delivery` rows sent by a Celery task after the
commit (through the outbox), never on the caller's path.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from apps.alerts.kinds import KINDS, Clear, Finding
from apps.alerts.models import AlertEvent, AlertRule, Delivery
from apps.outbox.services import enqueue

log = logging.getLogger("portal.alerts")


def queue_deliveries(event: AlertEvent, kind: str, channels: Iterable[Any]) -> list[Delivery]:
    """One pending delivery per enabled channel, sent by a task once the transaction commits."""
    from apps.alerts.tasks import deliver

    deliveries = [
        Delivery.objects.create(project_id=event.project_id, channel=channel, event=event, kind=kind)
        for channel in channels
        if channel.enabled
    ]
    for delivery in deliveries:
        enqueue(deliver, delivery.pk)
    return deliveries


def fire(rule: AlertRule, finding: Finding, now: datetime | None = None) -> AlertEvent | None:
    """Open an event for `finding` and queue its messages; None when the same key is already firing (it is counted
    there instead: deduplicated)."""
    now = now or timezone.now()
    if finding.instant and AlertEvent.objects.filter(rule=rule, key=finding.key).exists():
        return None  # the same announcement again (an event handled twice): sent once
    seen = AlertEvent.objects.filter(rule=rule, key=finding.key, status=AlertEvent.Status.FIRING).update(
        count=F("count") + 1, last_seen_at=now, value=finding.value
    )
    if seen:
        return None
    status = AlertEvent.Status.RESOLVED if finding.instant else AlertEvent.Status.FIRING
    try:
        with transaction.atomic():
            event = AlertEvent.objects.create(
                project_id=rule.project_id, rule=rule, key=finding.key[:200], status=status,
                subject=finding.subject[:200], message=finding.message, value=finding.value, url=finding.url[:500],
                started_at=now, last_seen_at=now, resolved_at=now if finding.instant else None,
            )  # fmt: skip
    except IntegrityError:  # another evaluation opened it meanwhile (the partial unique index): deduplicated
        return None
    queue_deliveries(event, Delivery.Kind.FIRING, rule.channels.all())
    return event


def resolve(event: AlertEvent, message: str = "", now: datetime | None = None, *, notify: bool = True) -> bool:
    """Close a firing event (a conditional update: of two passes only one sends "resolved")."""
    now = now or timezone.now()
    closed = AlertEvent.objects.filter(pk=event.pk, status=AlertEvent.Status.FIRING).update(
        status=AlertEvent.Status.RESOLVED, resolved_at=now, resolve_message=message
    )
    if not closed:
        return False
    event.status, event.resolved_at, event.resolve_message = AlertEvent.Status.RESOLVED, now, message
    if notify:
        queue_deliveries(event, Delivery.Kind.RESOLVED, event.rule.channels.all())
    return True


def _clear(rule: AlertRule, clear: Clear, now: datetime) -> bool:
    event = AlertEvent.objects.filter(rule=rule, key=clear.key, status=AlertEvent.Status.FIRING).first()
    return event is not None and resolve(event, clear.message, now)


def evaluate_rule(rule: AlertRule, now: datetime | None = None) -> tuple[int, int]:
    """One pass of a threshold rule: fire what holds and is new, resolve what no longer holds. Returns (fired,
    resolved)."""
    now = now or timezone.now()
    kind = KINDS.get(rule.kind)
    if kind is None or not kind.is_threshold or not rule.enabled:
        return 0, 0
    findings = {f.key: f for f in kind.evaluate(rule, now)}
    fired = sum(fire(rule, finding, now) is not None for finding in findings.values())
    resolved = 0
    for event in AlertEvent.objects.filter(rule=rule, status=AlertEvent.Status.FIRING).exclude(key__in=list(findings)):
        resolved += resolve(event, "", now)
    AlertRule.objects.filter(pk=rule.pk).update(last_evaluated_at=now)
    return fired, resolved


def evaluate_all(now: datetime | None = None) -> int:
    """The beat's pass over every enabled threshold rule; a rule that raises is logged and the others go on."""
    names = [name for name, kind in KINDS.items() if kind.is_threshold]
    count = 0
    for rule in AlertRule.objects.filter(enabled=True, kind__in=names).select_related("project").order_by("pk"):
        try:
            with transaction.atomic():
                evaluate_rule(rule, now)
            count += 1
        except Exception:
            log.exception("evaluating alert rule %s failed", rule.pk)
    return count


def handle_event(event: str, project_id: int, obj: Any, now: datetime | None = None) -> tuple[int, int]:
    """An event of a project (`run_finished`, `notebook_culled`) to every enabled rule whose kind listens to it."""
    now = now or timezone.now()
    names = [name for name, kind in KINDS.items() if event in kind.events]
    fired = resolved = 0
    rules = AlertRule.objects.filter(project_id=project_id, enabled=True, kind__in=names).select_related("project")
    for rule in rules.order_by("pk"):
        for outcome in KINDS[rule.kind].on_event(rule, event, obj):
            if isinstance(outcome, Clear):
                resolved += _clear(rule, outcome, now)
            else:
                fired += fire(rule, outcome, now) is not None
    return fired, resolved


def close_quietly(rule: AlertRule) -> int:
    """A rule changed or was disabled: what it had firing is closed without a message (its condition may mean
    something else now); a still-true condition fires again under the new settings."""
    now = timezone.now()
    return AlertEvent.objects.filter(rule=rule, status=AlertEvent.Status.FIRING).update(
        status=AlertEvent.Status.RESOLVED, resolved_at=now
    )
