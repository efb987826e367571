"""What the runtime calls back for notebook servers (label `notebook`): their log tail and state changes.

Runs in the agent's (or the Kubernetes controller's) process, on its threads: it only records and hands the slow
part (waiting for the server to answer) to a Celery task.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterator

from django.db import DatabaseError, connection

from apps.notebooks import services
from apps.notebooks.models import Notebook
from apps.runtime.workload import Phase, Status, Workload

logger = logging.getLogger(__name__)

TAIL_LINES = 200
FLUSH_SECONDS = 1.0  # a chatty server costs one UPDATE a second, not one per line
MAX_LINE = 2000


class NotebookSink:
    """Keeps the server's last TAIL_LINES lines in memory and writes them to `Notebook.log_tail` at most once a
    second (by a small thread of its own, so that a quiet server's last lines still arrive) and when it ends."""

    def __init__(self, pk: int, handle: str) -> None:
        self.pk, self.handle = pk, handle
        self.lines: deque[str] = deque(maxlen=TAIL_LINES)
        self.lock = threading.Lock()
        self.dirty = False
        self.closed = threading.Event()
        self.flusher = threading.Thread(target=self._run, name=f"notebook-log-{pk}", daemon=True)
        self.flusher.start()

    def write_many(self, replica: str, stream: str, texts: list[str]) -> None:
        with self.lock:
            self.lines.extend(text[:MAX_LINE] for text in texts)
            self.dirty = True

    def sample(self, cpu_percent: float, rss_bytes: int) -> None:
        pass  # a notebook's usage is not kept (yet)

    def close(self) -> None:
        self.closed.set()
        self.flusher.join(timeout=10)

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
            text, self.dirty = "\n".join(self.lines), False
        try:
            Notebook.objects.filter(pk=self.pk, handle=self.handle).update(log_tail=text)
        except DatabaseError:
            logger.warning("could not store the log of notebook %s; will retry", self.pk, exc_info=True)
            connection.close()
            with self.lock:
                self.dirty = True


class NotebookListener:
    def sink(self, workload: Workload) -> NotebookSink:
        return NotebookSink(int(workload.labels["notebook"]), workload.uid)

    def changed(self, workload: Workload, phase: Phase, status: Status | None = None) -> None:
        pk = int(workload.labels["notebook"])
        if phase == Phase.RUNNING:
            services.server_started(pk, workload.uid)
        elif phase.finished:
            services.record_end(pk, workload.uid, phase, status)

    def logs(self, workload_uid: str, since: int) -> Iterator[tuple[str, int, str, str, str]]:
        """The kept tail, numbered from 1 (older lines are not kept)."""
        tail = Notebook.objects.filter(handle=workload_uid).values_list("log_tail", flat=True).first() or ""
        for seq, text in enumerate(tail.splitlines(), start=1):
            if seq > since:
                yield "0", seq, "", "stdout", text
