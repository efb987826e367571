"""The units of Kubernetes work that Celery tasks do (apps/runtime/tasks.py), each safe to run twice or at once.

- `apply_workload(uid)`: make a pending row's objects real (apply.py: 409 → adopt what carries its label). A row
  that is no longer pending, was cancelled or is already created is left alone, so a message delivered again after
  a worker died, or a second one from the repair sweep, does nothing — or adopts what the first attempt created.
  A refusal (a 4xx other than 409, an invalid manifest, a foreign object) fails the workload with the reason;
  KubeUnavailable (the cluster cannot be reached, or 429/5xx outlasted the client's own retries) propagates, for
  the task to try again later.
- `delete_workload(uid)`: delete what the row applied (foreground; already gone is fine) and keep in `applied`
  only what could not be deleted. The leader records a cancellation once `applied` is empty (after the pods'
  logs are drained), so the listener hears the end from the process that heard the start.
- `refresh_inventory(pk)`: one cluster's nodes and requests into `Cluster.inventory` (inventory.py).
- `overdue()`: what the repair sweep queues again (a message lost with a worker the broker does not redeliver for,
  or a task that ran out of retries).
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.utils import timezone

from apps.runtime import hooks
from apps.runtime.kubernetes.apply import apply
from apps.runtime.kubernetes.client import KubeError, KubeUnavailable, client_for, setting
from apps.runtime.kubernetes.inventory import refresh
from apps.runtime.kubernetes.manifests import resource_of
from apps.runtime.models import Cluster, KubeWorkload
from apps.runtime.workload import Phase, Status, Workload

log = logging.getLogger("portal.kube")

ACTIVE = [KubeWorkload.State.PENDING, KubeWorkload.State.RUNNING]


def apply_workload(uid: str) -> str:
    """Apply the row `uid` if it still needs it; what happened, in a word (for the worker's log)."""
    row = KubeWorkload.objects.select_related("cluster").filter(uid=uid).first()
    if row is None or row.state != KubeWorkload.State.PENDING or row.cancel_requested or row.created:
        return "nothing to do"
    try:
        outcome = apply(client_for(row.cluster), row)
    except KubeError as exc:
        # Unreachable (the task tries again), or a kubeconfig the client cannot use (the repair sweep tries again,
        # once it may have been fixed): the row stays pending, saying why.
        reason = f"waiting for cluster {row.cluster.name}: {exc}"[:2000]
        KubeWorkload.objects.filter(pk=row.pk, state=KubeWorkload.State.PENDING).update(reason=reason)
        if isinstance(exc, KubeUnavailable):
            raise
        log.warning("%s: %s", uid, exc)
        return "waiting"
    if outcome.result == "failed":
        fail(row, outcome.reason)
    elif outcome.adopted:
        log.info("%s adopted %s", uid, ", ".join(outcome.adopted))
    return outcome.result


def fail(row: KubeWorkload, reason: str) -> None:
    """End an active row failed (nothing of it runs, so there is no log to wait for) and tell its listener."""
    ended = KubeWorkload.objects.filter(pk=row.pk, state__in=ACTIVE).update(
        state=KubeWorkload.State.FAILED, reason=reason[:2000], finished_at=timezone.now()
    )
    if not ended:
        return
    workload = Workload.from_dict(row.spec)
    listener = hooks.listener_for(workload)
    if listener is not None:
        listener.changed(workload, Phase.FAILED, Status(Phase.FAILED, reason=reason))


def delete_workload(uid: str) -> str:
    """Delete the objects the row `uid` applied, companions first, with foreground propagation (pods go before their
    owner). An object whose delete was accepted, or that was gone already, leaves `applied`; the first error (after
    every object was tried) is raised: KubeUnavailable for the task to try again, another KubeError when the cluster
    refuses (said in the row's reason; the repair sweep tries again)."""
    row = KubeWorkload.objects.select_related("cluster").filter(uid=uid).first()
    if row is None or not row.applied:
        return "nothing to do"
    client = client_for(row.cluster)  # a broken kubeconfig: KubeError, not retried (the repair sweep tries again)
    left: list[dict[str, str]] = []
    error: KubeError | None = None
    for item in reversed(row.applied):
        try:
            client.delete(resource_of(item["apiVersion"], item["kind"]), row.namespace, item["name"], "Foreground")
        except KubeError as exc:
            left.insert(0, item)
            error = error or exc
    KubeWorkload.objects.filter(pk=row.pk).update(applied=left)
    if error is not None:
        if not isinstance(error, KubeUnavailable):
            reason = f"cannot delete from cluster {row.cluster.name}: {error}"[:2000]
            KubeWorkload.objects.filter(pk=row.pk, state__in=ACTIVE).update(reason=reason)
        raise error
    return "deleted"


def refresh_inventory(cluster_pk: int) -> str:
    """Refresh one enabled cluster's inventory (a failure is recorded in it, see inventory.refresh)."""
    cluster = Cluster.objects.filter(pk=cluster_pk, enabled=True).first()
    if cluster is None:
        return "no such enabled cluster"
    inventory = refresh(cluster)
    return inventory.get("error") or "refreshed"


def overdue() -> tuple[list[str], list[str]]:
    """(uids to apply, uids to delete) that should have been done by now: rows pending and not created for longer
    than PORTAL_KUBE_REPAIR_AFTER seconds (300), and cancelled rows whose objects are still listed. Queueing them
    again is harmless: both tasks are idempotent."""
    cutoff = timezone.now() - timedelta(seconds=setting("REPAIR_AFTER", 300.0))
    to_apply = KubeWorkload.objects.filter(
        state=KubeWorkload.State.PENDING, created=False, cancel_requested=False, created_at__lt=cutoff
    )
    to_delete = KubeWorkload.objects.filter(state__in=ACTIVE, cancel_requested=True).exclude(applied=[])
    return list(to_apply.values_list("uid", flat=True)), list(to_delete.values_list("uid", flat=True))
