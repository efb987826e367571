"""The transactional outbox: Celery tasks that committed writes asked for, kept until the broker took them."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class PendingTask(models.Model):
    """A task a transaction queued (`apps.outbox.services.enqueue`), written in that transaction, so it exists exactly
    when the write it follows committed. Sent right after the commit and deleted once the broker accepted it; a row
    still here at `due_at` was not accepted (broker down, process killed in between), and the drain sends it again."""

    name = models.CharField(max_length=200)
    args = models.JSONField(default=list)
    kwargs = models.JSONField(default=dict)
    eta = models.DateTimeField(null=True, blank=True)  # a countdown, as the time it ends: not run before
    created_at = models.DateTimeField(default=timezone.now)
    # When a sender may next take the row: the process that wrote it owns it until then, a drain that took it
    # until its try ends, and after a failed try it waits out its backoff.
    due_at = models.DateTimeField(db_index=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)

    class Meta:
        ordering = ["due_at", "pk"]

    def __str__(self) -> str:
        return f"{self.name}{tuple(self.args)}"
