"""Queue Celery tasks after a commit so that a broker outage delays the work but never loses it nor fails the write.

`enqueue(task, *args)` writes a `PendingTask` in the caller's transaction and sends it once that commits; the row is
deleted when the broker accepted the message. When the broker is down the write still commits and the request still
answers as usual; the row stays, and `drain()` (a beat task run by the worker, every few seconds) sends it once the
broker is back. A message can be sent twice (the process dies between the broker's yes and the delete, or PostgreSQL
crashes just after a delete, which does not wait for the WAL flush): the tasks queued this way are idempotent, as
every task here must be. See docs/architecture.md, "Queueing after a commit".
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from celery import current_app
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from kombu.exceptions import OperationalError

from apps.outbox.models import PendingTask
from portal.lib.asynccommit import execute_unflushed, unflushed, update_unflushed

log = logging.getLogger("portal.outbox")

# How long the sender that took a row owns it: the process that wrote it (until it has tried once after the commit)
# or a drain pass (until its try ends). Past it, a drain takes the row over.
LEASE = timedelta(seconds=30)
# A row the broker refused for another reason than being unreachable (a task this process does not know, a body it
# cannot encode) waits this long before the next try, doubling up to the cap, so it never holds the others back.
RETRY_BACKOFF = timedelta(seconds=30)
RETRY_BACKOFF_MAX = timedelta(hours=1)
BROKER_DOWN = (OperationalError, ConnectionError, OSError, TimeoutError)
BATCH = 200


def enqueue(task: Any, *args: Any, countdown: float | None = None, **kwargs: Any) -> PendingTask:
    """Run Celery task `task(*args, **kwargs)` once the current transaction commits (at once outside one), not before
    `countdown` seconds. Arguments must be JSON (ids, not objects)."""
    now = timezone.now()
    row = PendingTask.objects.create(
        name=task.name,
        args=list(args),
        kwargs=kwargs,
        eta=now + timedelta(seconds=countdown) if countdown else None,
        due_at=now + LEASE,
    )
    transaction.on_commit(lambda: _send_after_commit(row), robust=True)
    return row


def enqueue_many(task: Any, calls: Sequence[Sequence[Any]]) -> list[PendingTask]:
    """`enqueue(task, *args)` for each `args` of `calls`, in one insert; after the commit they are claimed in one
    statement, handed to the broker one by one and deleted in one statement (a study's pass queues its new runs'
    advances so)."""
    now = timezone.now()
    rows = PendingTask.objects.bulk_create(
        PendingTask(name=task.name, args=list(args), kwargs={}, created_at=now, due_at=now + LEASE) for args in calls
    )
    if rows:
        transaction.on_commit(lambda: _send_many_after_commit(rows), robust=True)
    return rows


def drain(limit: int | None = None) -> int:
    """Send the rows that are due (oldest first) and return how many the broker took. Stops at the first row the
    broker cannot be reached for: it is still down, the rest would wait as long each."""
    sent = 0
    while limit is None or sent < limit:
        now = timezone.now()
        rows = list(PendingTask.objects.filter(due_at__lte=now).order_by("due_at", "pk")[:BATCH])
        if not rows:
            break
        for row in rows:
            # Claimed by a conditional update: of two drains (or a drain and the writer) only one sends it.
            if not PendingTask.objects.filter(pk=row.pk, due_at=row.due_at).update(due_at=now + LEASE):
                continue
            outcome = _send(row)
            if outcome is None:
                return sent
            sent += outcome
    return sent


def _send_after_commit(row: PendingTask) -> None:
    # A drain may have taken the row over if the writer's transaction outlasted the lease. The claim and the delete
    # after the send commit without waiting for the WAL flush (portal.lib.asynccommit): one lost in a crash of
    # PostgreSQL leaves the row due, and a drain sends it again, as when this process dies between the broker's yes
    # and the delete (every task queued here is idempotent). Each run started pays both on its way out.
    claim = PendingTask.objects.filter(pk=row.pk, due_at=row.due_at)
    if update_unflushed(claim, due_at=timezone.now() + LEASE):
        _send(row)


def _send_many_after_commit(rows: list[PendingTask]) -> None:
    """`_send_after_commit` for rows written together (one `due_at`): one claim and one delete for all of them."""
    ids = [row.pk for row in rows]
    claim = timezone.now() + LEASE
    claimed = update_unflushed(PendingTask.objects.filter(pk__in=ids, due_at=rows[0].due_at), due_at=claim)
    if claimed < len(rows):  # a drain took some over: the rows still ours are those this claim dated
        mine = set(PendingTask.objects.filter(pk__in=ids, due_at=claim).values_list("pk", flat=True))
        rows = [row for row in rows if row.pk in mine]
    sent = []
    for i, row in enumerate(rows):
        outcome = _hand_over(row)
        if outcome is None:  # the broker cannot be reached: the rest are due again at once too, for the next drain
            PendingTask.objects.filter(pk__in=[r.pk for r in rows[i + 1 :]]).update(due_at=timezone.now())
            break
        if outcome:
            sent.append(row.pk)
    if sent:
        # One statement: Django's delete() would read the rows first to send them pre_delete (the audit listens), and
        # rows written by bulk_create sent no post_save either.
        placeholders = ", ".join(["%s"] * len(sent))
        execute_unflushed(f"DELETE FROM {PendingTask._meta.db_table} WHERE id IN ({placeholders})", sent)


def _send(row: PendingTask) -> int | None:
    """Hand `row` to the broker and forget it: 1 when sent, 0 when refused (tried again later), None when the broker
    cannot be reached (the row is due again at once, for the next drain)."""
    outcome = _hand_over(row)
    if outcome:
        with unflushed():
            PendingTask.objects.filter(pk=row.pk).delete()
    return outcome


def _hand_over(row: PendingTask) -> int | None:
    """`_send` less the delete: 1 when the broker took `row`, 0 or None (as `_send`) with the row's next try set."""
    now = timezone.now()
    options = {"eta": row.eta} if row.eta is not None and row.eta > now else {}
    try:
        current_app.tasks[row.name].apply_async(row.args, row.kwargs, **options)
    except BROKER_DOWN as exc:
        log.warning("the broker did not take %s (kept, sent again when it is back): %s", row, exc)
        _failed(row, exc, now)
        return None
    except Exception as exc:
        log.exception("could not send %s; trying again later", row)
        _failed(row, exc, now + min(RETRY_BACKOFF * 2**row.attempts, RETRY_BACKOFF_MAX))
        return 0
    return 1


def _failed(row: PendingTask, exc: Exception, due_at) -> None:
    error = f"{type(exc).__name__}: {exc}"[:2000]
    PendingTask.objects.filter(pk=row.pk).update(attempts=F("attempts") + 1, last_error=error, due_at=due_at)
