"""Refreshing `Cluster.inventory` (nodes, allocatable and requested resources) from the cluster's API.

The controller calls `refresh(cluster)` for every enabled cluster every PORTAL_KUBE_INVENTORY seconds, on a
thread of its own (listing every pod of a large cluster takes a while). A failed refresh keeps the last good
nodes and says why in `error`; `inventory_at` is the time of the last good one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from django.db import DatabaseError, connection
from django.utils import timezone

from apps.runtime.kubernetes.capacity import inventory_of
from apps.runtime.kubernetes.client import NODE, POD, KubeError, client_for
from apps.runtime.models import Cluster

log = logging.getLogger("portal.kube")

# Pods that hold resources: the API server filters the others out (fewer bytes from a large cluster).
ACTIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"


def refresh(cluster: Cluster) -> dict:
    """Read the cluster's nodes and pods, store the inventory and return it."""
    try:
        client = client_for(cluster)
        nodes, _version = client.list(NODE)
        pods, _version = client.list(POD, None, field_selector=ACTIVE_PODS)
    except KubeError as exc:
        inventory = {"nodes": (cluster.inventory or {}).get("nodes", []), "error": str(exc)[:1000]}
        Cluster.objects.filter(pk=cluster.pk).update(inventory=inventory)
        return inventory
    inventory = inventory_of(
        nodes,
        pods,
        gpu_resource=cluster.gpu_resource,
        group_label=cluster.resource_group_label,
        gpu_type_label=cluster.gpu_type_label,
        node_selector=cluster.node_selector or {},
    )
    Cluster.objects.filter(pk=cluster.pk).update(inventory=inventory, inventory_at=timezone.now())
    return inventory


class InventoryThread:
    """Refreshes every enabled cluster's inventory every `interval` seconds while `active()` says so."""

    def __init__(self, interval: float, active: Callable[[], bool]) -> None:
        self.interval = interval
        self.active = active
        self.stopping = threading.Event()
        self.refreshed = threading.Event()  # set after each full round (tests wait on it)
        self._thread = threading.Thread(target=self._run, name="inventory", daemon=True)

    def start(self) -> InventoryThread:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            while not self.stopping.is_set():
                if self.active():
                    try:
                        for cluster in Cluster.objects.filter(enabled=True):
                            if self.stopping.is_set():
                                break
                            refresh(cluster)
                        self.refreshed.set()
                    except DatabaseError:
                        log.exception("refreshing cluster inventories failed")
                        connection.close()
                self.stopping.wait(self.interval)
        finally:
            connection.close()  # this thread's own
