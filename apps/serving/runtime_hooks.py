"""What the runtime calls back for model-server replicas (label `serving_replica`): output, samples, state changes.

Runs in the agent's (or the Kubernetes controller's) process, on its threads: it records, and hands the slow part
(waiting for a replica to answer its readiness probe) to a Celery task — which the periodic reconcile backs up.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.db import DatabaseError, connection

from apps.runtime import hooks
from apps.runtime.secretenv import Secrets
from apps.runtime.tail import TailSink
from apps.runtime.workload import Phase, Status, Workload
from apps.serving.models import Replica
from apps.serving.replicas import BANNER, LABEL
from apps.serving.services import rollout

logger = logging.getLogger(__name__)

CPU_STEP = 5.0  # percentage points
CPU_EVERY = 10.0  # seconds


class ReplicaSink(TailSink):
    """A replica's last lines and its latest CPU sample, in its row (apps/runtime/tail.py). The model server's
    banner line, which says the port it took, is stored at once: the readiness probe needs it."""

    model = Replica

    def __init__(self, pk: int, handle: str) -> None:
        self.cpu: float | None = None
        self.cpu_written: float | None = None
        self.cpu_written_at = 0.0
        self.upstream_known = False
        super().__init__(pk, handle)

    def write_many(self, replica: str, stream: str, texts: list[str]) -> None:
        if not self.upstream_known and stream == "stdout":
            for text in texts:
                match = BANNER.search(text)
                if match is not None:
                    self._found_upstream(match.group(1))
                    break
        super().write_many(replica, stream, texts)

    def sample(self, cpu_percent: float, rss_bytes: int) -> None:
        """The latest CPU % (the autoscaler's cpu metric), stored when it moved by CPU_STEP points or CPU_EVERY
        seconds passed: an idle replica costs no write a second."""
        now = time.monotonic()
        with self.lock:
            self.cpu = round(cpu_percent, 1)
            written = self.cpu_written
            if written is None or abs(self.cpu - written) >= CPU_STEP or now - self.cpu_written_at >= CPU_EVERY:
                self.cpu_written, self.cpu_written_at, self.dirty = self.cpu, now, True

    def values(self) -> dict[str, Any]:
        return {**super().values(), "cpu_percent": self.cpu}

    def _found_upstream(self, url: str) -> None:
        self.upstream_known = True
        try:
            # Only where none is known: on a cluster the banner says 0.0.0.0 and the Service's address is the one.
            Replica.objects.filter(pk=self.pk, handle=self.handle, upstream="").update(upstream=url)
        except DatabaseError:
            logger.warning("could not store the address of replica %s", self.pk, exc_info=True)
            connection.close()


class ReplicaListener(hooks.Listener):
    def sink(self, workload: Workload, secrets: Secrets) -> ReplicaSink:
        return ReplicaSink(int(workload.labels[LABEL]), workload.uid)

    def changed(self, workload: Workload, phase: Phase, status: Status | None = None) -> None:
        pk = int(workload.labels[LABEL])
        if phase == Phase.RUNNING:
            if workload.service:  # on a cluster: running means the Deployment (or InferenceService) is ready
                rollout.mark_ready(pk)
                return
            from apps.serving.tasks import await_ready

            try:
                await_ready.delay(pk)
            except Exception:  # no broker: the reconcile pass probes starting replicas too
                logger.warning("could not queue the readiness check of replica %s", pk, exc_info=True)
        elif phase.finished:
            rollout.record_end(pk, workload.uid, status or Status(phase))
