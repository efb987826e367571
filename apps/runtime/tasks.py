"""Celery tasks of the `kubernetes` runtime: the units of cluster work (docs/kubernetes.md, "Leader and tasks").

They run on their own queue, `kubernetes` (CELERY_TASK_ROUTES), so that the workers that talk to clusters can be
scaled, and credentialed, apart from the others. Each takes a workload's uid or a cluster's pk, is idempotent
(apps/runtime/kubernetes/operations.py), and is acknowledged only once it ended (`acks_late`; a worker process that
died mid-task gives the message back, `reject_on_worker_lost`), so a killed worker loses nothing and a message
delivered twice does no harm. A cluster that cannot be reached, or answers 429/5xx after the client's own retries,
makes the task try again later with exponential backoff (at least the Retry-After asked for); any other 4xx is not
retried: a refused apply fails its workload with the API server's reason.
"""

from __future__ import annotations

from collections.abc import Callable

from celery import shared_task

from apps.outbox.services import enqueue
from apps.runtime.kubernetes import operations
from apps.runtime.kubernetes.client import KubeUnavailable
from apps.runtime.kubernetes.retry import task_countdown
from apps.runtime.models import Cluster

# Up to ~6 minutes of retries (2 s doubling, capped at 2 minutes); past them the repair sweep queues the work again.
MAX_RETRIES = 8
LATE = {"acks_late": True, "reject_on_worker_lost": True, "ignore_result": True}


def _retried(task, operation: Callable[[str], str], uid: str) -> str:
    """`operation(uid)`, tried again later by `task` while the cluster cannot be reached or is overloaded."""
    try:
        return operation(uid)
    except KubeUnavailable as exc:
        raise task.retry(exc=exc, countdown=task_countdown(task.request.retries, exc.retry_after)) from None


@shared_task(bind=True, max_retries=MAX_RETRIES, **LATE)
def kube_apply(self, uid: str) -> str:
    """Create the objects of the workload `uid` (adopting what an earlier attempt created)."""
    return _retried(self, operations.apply_workload, uid)


@shared_task(bind=True, max_retries=MAX_RETRIES, **LATE)
def kube_delete(self, uid: str) -> str:
    """Delete the objects of the workload `uid` (cancelled, or failed on the cluster)."""
    return _retried(self, operations.delete_workload, uid)


@shared_task(**LATE)
def kube_refresh_inventory(cluster_pk: int) -> str:
    """One cluster's inventory (a refresh that fails says why in the inventory; the next one tries again)."""
    return operations.refresh_inventory(cluster_pk)


@shared_task(**LATE)
def kube_refresh_inventories() -> int:
    """Beat's: one refresh per enabled cluster, each a task of its own (a slow cluster holds up no other)."""
    pks = list(Cluster.objects.filter(enabled=True).values_list("pk", flat=True))
    for pk in pks:
        kube_refresh_inventory.delay(pk)
    return len(pks)


@shared_task(**LATE)
def kube_repair() -> int:
    """Beat's: queue again the applies and deletes that should have happened by now (a message the broker did not
    give back after its worker died, a task out of retries). Through the outbox, as every queued change here is."""
    to_apply, to_delete = operations.overdue()
    for uid in to_apply:
        enqueue(kube_apply, uid)
    for uid in to_delete:
        enqueue(kube_delete, uid)
    return len(to_apply) + len(to_delete)
