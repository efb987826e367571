"""Refreshing `Cluster.inventory` (nodes, allocatable and requested resources) from the cluster's API.

Beat queues a refresh of every enabled cluster every 30 seconds, each a task of its own on the `kubernetes` queue
(apps/runtime/tasks.py; listing every pod of a large cluster takes a while). A failed refresh keeps the last good
nodes and says why in `error`; `inventory_at` is the time of the last good one.
"""

from __future__ import annotations

import logging

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
