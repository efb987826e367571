"""What the runtime calls back for model-server replicas (label `serving_replica`): output, samples, state changes.

Runs in the agent's (or the Kubernetes controller's) process, on its threads: it records, and hands the slow part
(waiting for a replica to answer its readiness probe) to a Celery task — which the periodic reconcile backs up.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.db import DatabaseError, connection
from django.urls import reverse

from apps.runtime import hooks
from apps.runtime.secretenv import Secrets
from apps.runtime.tail import TailSink
from apps.runtime.usage import SERVICE, Holder, label_ids
from apps.runtime.workload import Phase, Status, Workload
from apps.serving.models import Replica
from apps.serving.replicas import BANNER, LABEL
from apps.serving.services import rollout
from portal.lib.resources import Resources

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

    def sample(
        self,
        cpu_percent: float,
        rss_bytes: int,
        *,
        replica: str = "",
        gpu_percent: float | None = None,
        gpu_memory_bytes: int | None = None,
    ) -> None:
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


def describe_holders(holders: list[Holder]) -> None:
    """The capacity page's words for a model server's workload: service, revision and replica, who made the
    revision, the service's page."""
    rows = Replica.objects.filter(pk__in=label_ids(holders, LABEL))
    replicas = {r.pk: r for r in rows.select_related("revision__service__project", "revision__created_by")}
    for holder in holders:
        if (replica := replicas.get(int(holder.labels.get(LABEL) or 0))) is None:
            continue
        service = replica.revision.service
        holder.kind = SERVICE
        holder.what = f"{service.name} r{replica.revision.number} #{replica.index}"
        creator = replica.revision.created_by
        holder.user = creator.username if creator else ""
        holder.url = reverse("serving:service-detail", kwargs={"project": service.project.slug, "pk": service.pk})
        holder.project_name = service.project.name


def sandbox_paths(workload: Workload, env: dict[str, str]) -> list[Path]:
    """A local model server's model where the portal put it, read-only (`hooks.register_readable_paths`): on a local
    artifact store that is the registered version's artifact folder itself (apps/serving/services/deploy.py), under
    the hidden MEDIA_ROOT. Taken from the revision the portal froze, never from the command, and only when the
    replica is the project's own."""
    pk = workload.labels.get(LABEL)
    if workload.kind != "service" or not str(pk or "").isdigit():
        return []
    replica = Replica.objects.select_related("revision__service__project").filter(pk=int(pk)).first()
    if replica is None or replica.revision.service.project.slug != workload.project:
        return []
    path = Path(str(replica.revision.config.get("model_path") or "/nonexistent")).absolute()
    return [path] if path.is_absolute() and path.exists() and path != Path("/") else []


def quota_held(project_ids: set[int], except_pk: int | None) -> Iterator[tuple[int, Resources]]:
    """What starting and serving replicas hold of their projects' quotas (apps/projects/usage.py)."""
    replicas = Replica.objects.filter(
        revision__service__project_id__in=project_ids, status__in=(Replica.Status.STARTING, Replica.Status.READY)
    )
    if except_pk is not None:
        replicas = replicas.exclude(pk=except_pk)
    for project_id, config in replicas.values_list("revision__service__project_id", "revision__config"):
        yield project_id, Resources.from_json((config or {}).get("resources"))
