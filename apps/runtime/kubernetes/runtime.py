"""The `kubernetes` runtime: submit writes a `KubeWorkload` row and queues the task that makes it real on the
cluster (apps/runtime/tasks.py); the controller (`manage.py runkube`) watches it and follows its pods' logs. The
row is the intent; everything is level-triggered from it.

The controller's liveness is an `Agent` row of kind "kubernetes" (heartbeat, pid, wake-up address):
`live_controllers()` finds them.
"""

from __future__ import annotations

import time

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from apps.outbox.services import enqueue
from apps.runtime import tasks
from apps.runtime.base import send_wakeups
from apps.runtime.kubernetes.capacity import capacity_of
from apps.runtime.models import Agent, Cluster, KubeWorkload, ProjectCluster, heartbeat_cutoff
from apps.runtime.rows import RowRuntime
from apps.runtime.workload import Capacity, Phase, Status, Workload

ADDRESS_TTL = 0.25  # seconds: a busy dispatcher asks several times a second; the answer changes slowly

_addresses: tuple[float, list[str]] = (0.0, [])
_ready_at = float("-inf")


def live_controllers() -> QuerySet[Agent]:
    """`Agent` rows of running controllers (fresh heartbeat, not stopped)."""
    return Agent.objects.filter(
        kind=Agent.Kind.KUBERNETES, heartbeat_at__gte=heartbeat_cutoff(), stopped_at__isnull=True
    )


def wake_controllers() -> None:
    """Nudge every live controller (best effort: a controller also looks for work every second)."""
    global _addresses
    now = time.monotonic()
    if now - _addresses[0] > ADDRESS_TTL:
        _addresses = (now, list(live_controllers().values_list("address", flat=True)))
    send_wakeups(_addresses[1])


def placement(workload: Workload, clusters: dict[str, Cluster]) -> tuple[Cluster, str]:
    """(cluster, namespace) of a workload: the cluster it names, else its project's default binding, else the
    first enabled cluster; the namespace it names, else the binding's, else the cluster's default."""
    name, namespace = workload.cluster, workload.namespace
    if name:
        cluster = clusters.get(name)
        if cluster is None:
            raise LookupError(f"no enabled Kubernetes cluster named {name!r}")
        if not namespace:
            binding = ProjectCluster.objects.filter(project__slug=workload.project, cluster=cluster).first()
            namespace = binding.effective_namespace if binding else cluster.default_namespace
        return cluster, namespace
    binding = (
        ProjectCluster.objects.filter(project__slug=workload.project, cluster__enabled=True)
        .select_related("cluster")
        .first()
    )
    if binding is not None:
        return binding.cluster, namespace or binding.effective_namespace
    cluster = next(iter(clusters.values()), None)
    if cluster is None:
        raise LookupError("no enabled Kubernetes cluster: register one (and bind the project to it)")
    return cluster, namespace or cluster.default_namespace


class KubernetesRuntime(RowRuntime):
    name = "kubernetes"
    model = KubeWorkload
    on_cluster = True

    def submit_many(self, workloads: list[Workload]) -> list[str]:
        """One row per workload (a uid submitted before is the same workload: the conflict is ignored)."""
        clusters = {c.name: c for c in Cluster.objects.filter(enabled=True).order_by("name")}
        rows = []
        for workload in workloads:
            cluster, namespace = placement(workload, clusters)
            rows.append(KubeWorkload(uid=workload.uid, cluster=cluster, namespace=namespace, spec=workload.as_dict()))
        KubeWorkload.objects.bulk_create(rows, ignore_conflicts=True)
        for row in rows:  # a uid submitted again is applied again: a no-op (apps/runtime/tasks.py)
            enqueue(tasks.kube_apply, row.uid)
        transaction.on_commit(wake_controllers)  # a controller woken before the commit would find nothing
        return [w.uid for w in workloads]

    def status_of(self, row: KubeWorkload) -> Status:
        return Status(Phase(row.state), exit_code=row.exit_code, reason=row.reason, replicas=dict(row.replicas or {}))

    def cancel_unstarted(self, handle: str) -> bool:
        """A row nothing was applied for yet is cancelled here at once (for the others, `cancel` asks a task to
        delete their objects)."""
        unapplied = KubeWorkload.objects.filter(uid=handle, state=KubeWorkload.State.PENDING, created=False, applied=[])
        return bool(
            unapplied.update(
                state=KubeWorkload.State.CANCELLED,
                cancel_requested=True,
                reason="cancelled",
                finished_at=timezone.now(),
            )
        )

    def stop_started(self, handle: str) -> None:
        """A task deletes its objects (foreground); the controller records the cancellation once they are gone."""
        enqueue(tasks.kube_delete, handle)

    def wake(self) -> None:
        wake_controllers()

    def ready(self) -> bool:
        """A live controller and an enabled cluster (remembered for ADDRESS_TTL)."""
        global _ready_at
        now = time.monotonic()
        if now - _ready_at < ADDRESS_TTL:
            return True
        if live_controllers().exists() and Cluster.objects.filter(enabled=True).exists():
            _ready_at = now
            return True
        return False

    def capacity(self, cluster: str | None = None) -> Capacity | None:
        """Free and total resources of one cluster (by name) or of all enabled clusters, from the inventory
        the controller keeps; None without a live controller, without an enabled cluster, or when no usable
        inventory is known (never read, or the last refresh failed)."""
        if not live_controllers().exists():
            return None
        clusters = Cluster.objects.filter(enabled=True)
        if cluster:
            clusters = clusters.filter(name=cluster)
        found = [
            capacity_of(c.inventory)
            for c in clusters.only("inventory")
            if c.inventory and not (c.inventory.get("error") or "")
        ]
        found = [c for c in found if c is not None]
        if not found:
            return None
        return Capacity(
            cpu=round(sum(c.cpu for c in found), 3),
            memory_bytes=sum(c.memory_bytes for c in found),
            gpu=round(sum(c.gpu for c in found), 3),
            total_cpu=round(sum(c.total_cpu for c in found), 3),
            total_memory_bytes=sum(c.total_memory_bytes for c in found),
            total_gpu=round(sum(c.total_gpu for c in found), 3),
            nodes=tuple(room for c in found for room in c.nodes),
        )
