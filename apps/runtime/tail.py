"""A sink for long-running servers (notebooks, model-server replicas): their last lines, not every line.

Unlike a task's output (every line stored and streamed: apps/jobs/logs.py), a server's log matters for its last
TAIL_LINES lines: why it failed to start, what it printed last. They are kept in memory and written to the row's
`log_tail` at most once every FLUSH_SECONDS (by a small thread of its own, so that a quiet server's last lines still
arrive) and when it ends: a chatty server costs one UPDATE a second, not one per line.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Any

from django.db import DatabaseError, connection, models

logger = logging.getLogger(__name__)

TAIL_LINES = 200
FLUSH_SECONDS = 1.0
MAX_LINE = 2000


class TailSink:
    """The runtime's sink (apps/runtime/hooks.py) for the workload of one row of `model`, matched by primary key
    and `handle` (a restarted server's new workload never writes over it). Subclasses add fields in `values`."""

    model: type[models.Model]

    def __init__(self, pk: int, handle: str) -> None:
        self.pk, self.handle = pk, handle
        self.lines: deque[str] = deque(maxlen=TAIL_LINES)
        self.lock = threading.Lock()
        self.dirty = False
        self.closed = threading.Event()
        self.flusher = threading.Thread(target=self._run, name=f"{self.model._meta.model_name}-log-{pk}", daemon=True)
        self.flusher.start()

    def write_many(self, replica: str, stream: str, texts: list[str]) -> None:
        with self.lock:
            self.lines.extend(text[:MAX_LINE] for text in texts)
            self.dirty = True

    def sample(
        self,
        cpu_percent: float,
        rss_bytes: int,
        *,
        replica: str = "",
        gpu_percent: float | None = None,
        gpu_memory_bytes: int | None = None,
    ) -> None:
        pass  # usage is not kept unless a subclass wants it

    def close(self) -> None:
        self.closed.set()
        self.flusher.join(timeout=10)

    def values(self) -> dict[str, Any]:
        """The fields to write (called with the lock held)."""
        return {"log_tail": "\n".join(self.lines)}

    def _run(self) -> None:
        try:
            while not self.closed.wait(FLUSH_SECONDS):
                self._flush()
            self._flush()
        finally:
            connection.close()  # this thread's own

    def _flush(self) -> None:
        with self.lock:
            if not self.dirty:
                return
            values, self.dirty = self.values(), False
        try:
            self.model.objects.filter(pk=self.pk, handle=self.handle).update(**values)
        except DatabaseError:
            logger.warning("could not store the log of %s %s; will retry", self.model.__name__, self.pk, exc_info=True)
            connection.close()
            with self.lock:
                self.dirty = True
