"""What the runtime calls back for notebook servers (label `notebook`): their log tail and state changes.

Runs in the agent's (or the Kubernetes controller's) process, on its threads: it only records and hands the slow
part (waiting for the server to answer) to a Celery task.
"""

from __future__ import annotations

import logging

from apps.notebooks import services
from apps.notebooks.models import Notebook
from apps.runtime import hooks
from apps.runtime.secretenv import Secrets
from apps.runtime.tail import TailSink
from apps.runtime.workload import Phase, Status, Workload

logger = logging.getLogger(__name__)


class NotebookSink(TailSink):
    """The server's last lines, in `Notebook.log_tail` (apps/runtime/tail.py)."""

    model = Notebook


class NotebookListener(hooks.Listener):
    def sink(self, workload: Workload, secrets: Secrets) -> NotebookSink:
        return NotebookSink(int(workload.labels["notebook"]), workload.uid)

    def changed(self, workload: Workload, phase: Phase, status: Status | None = None) -> None:
        pk = int(workload.labels["notebook"])
        if phase == Phase.RUNNING:
            services.server_started(pk, workload.uid)
        elif phase.finished:
            services.record_end(pk, workload.uid, phase, status)
