"""How the local agent records how its workloads ended and tells their listeners (apps/runtime/hooks.py).

One thread, in order (a start can never overtake the end), in batches: whatever queued up while the thread was
busy is delivered together. A listener that `batches_with_ends` (hooks.Listener; the jobs listener does) takes a
batch at once in `changed_many`, inside the transaction that records the ends of its workloads: the end and what the
listener makes of it (the jobs listener advances the run and dispatches what became ready) are one commit. Any other
hears of each notice in turn, in `changed`, after the ends were recorded on their own.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction

from apps.runtime import hooks
from apps.runtime.models import LocalWorkload
from apps.runtime.workload import Phase, Status, Workload

log = logging.getLogger("portal.agent")

# How long a start waits for its end before it is delivered on its own: a start changes no decision (the run page
# shows the task running that much later), and the tasks that end within it cost one notice instead of two.
START_SETTLE_SECONDS = 0.05


@dataclass
class End:
    """How a workload ended, as its row records it."""

    row_id: int
    state: str
    exit_code: int | None
    reason: str
    usage: dict
    finished_at: datetime


@dataclass
class Notice:
    workload: Workload
    phase: Phase
    status: Status | None = None
    end: End | None = None  # recorded when the notice is delivered


def record_ends(ends: list[End]) -> None:
    for end in ends:
        LocalWorkload.objects.filter(pk=end.row_id).update(
            state=end.state, exit_code=end.exit_code, reason=end.reason, finished_at=end.finished_at, usage=end.usage
        )


class Notifier:
    def __init__(self) -> None:
        self.notices: queue.SimpleQueue[Notice | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, name="notify", daemon=True)
        self.thread.start()

    def put(self, notice: Notice) -> None:
        self.notices.put(notice)

    def stop(self, timeout: float) -> None:
        """Deliver what is queued, then end."""
        self.notices.put(None)
        self.thread.join(timeout=timeout)

    def _run(self) -> None:
        stopping = False
        while not stopping:
            batch = self._next_batch()
            if batch[-1] is None:
                batch.pop()
                stopping = True
            replace_broken_connection()
            self.deliver(batch)

    def _next_batch(self) -> list[Notice | None]:
        """What queued up, waiting up to START_SETTLE_SECONDS more while it holds only starts: the end of a short
        task then arrives with its start, which is not recorded on its own (a no-op task ends in milliseconds)."""
        batch = [self.notices.get()]
        settle_until = time.monotonic() + START_SETTLE_SECONDS
        while True:
            with contextlib.suppress(queue.Empty):
                while batch[-1] is not None:
                    batch.append(self.notices.get_nowait())
            wait = settle_until - time.monotonic()
            if batch[-1] is None or wait <= 0 or any(n is None or n.phase != Phase.RUNNING for n in batch):
                return batch
            try:
                batch.append(self.notices.get(timeout=wait))
            except queue.Empty:
                return batch

    @staticmethod
    def deliver(batch: list[Notice]) -> None:
        by_listener: dict[int, tuple[hooks.Listener | None, list[Notice]]] = {}
        for notice in batch:
            listener = hooks.listener_for(notice.workload)
            by_listener.setdefault(id(listener), (listener, []))[1].append(notice)
        for listener, notices in by_listener.values():
            ends = [n.end for n in notices if n.end is not None]
            batches = listener is not None and listener.batches_with_ends
            if batches:
                try:
                    with transaction.atomic() if ends else contextlib.nullcontext():
                        record_ends(ends)
                        listener.changed_many([(n.workload, n.phase, n.status) for n in notices])
                    continue
                except Exception:
                    log.exception("notifying about %s failed", ", ".join(n.workload.uid for n in notices))
                    # The ends are recorded all the same: the reconcile loop finds them and advances the runs.
            _attempt(record_ends, ends)
            if listener is not None and not batches:
                for n in notices:
                    _attempt(listener.changed, n.workload, n.phase, n.status)


def _attempt(call, *args) -> None:
    try:
        call(*args)
    except Exception:
        log.exception("%s failed", getattr(call, "__qualname__", call))


def replace_broken_connection() -> None:
    """Drop this thread's connection if it failed or outlived its age (a cheap check, without the
    round trip of a health check)."""
    if connection.connection is not None and (
        connection.errors_occurred or (connection.close_at is not None and time.monotonic() >= connection.close_at)
    ):
        connection.close()
