"""A cluster's inventory (what the controller stores in `Cluster.inventory`) and the capacity read from it.

`inventory_of(nodes, pods, …)` is a pure function over node and pod dicts as the API returns them:

    {"nodes": [{"name", "group", "gpu_type", "ready", "schedulable", "selected",
                "allocatable": {"cpu", "memory_bytes", "gpu"}, "requested": {…}, "pods"}], "error": ""}

`requested` sums the effective requests of the node's non-terminal pods (all namespaces): per pod the larger
of its containers' sum and its largest init container, plus its overhead, as the scheduler counts them (a
container with only limits requests its limits). `selected` says whether the node matches the cluster's
node selector, i.e. whether the portal's pods can land there. `capacity_of(inventory)` sums allocatable −
requested over ready, schedulable, selected nodes; `capacity_by_group` does so per (resource group, GPU type).
"""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal, InvalidOperation
from typing import Any

from kubernetes.utils import parse_quantity

from apps.runtime.workload import Capacity, NodeRoom
from portal.lib.resources import Resources

TERMINAL_PHASES = ("Succeeded", "Failed")


def quantity(value: Any) -> Decimal:
    """A Kubernetes quantity ("7500m", "32Gi", "1e3", 4) as a number; 0 for what is missing or malformed."""
    if value in (None, ""):
        return Decimal(0)
    try:
        return parse_quantity(value)
    except (ValueError, InvalidOperation):
        return Decimal(0)


def _amounts(resources: dict[str, Any], gpu_resource: str) -> dict[str, Decimal]:
    return {
        "cpu": quantity(resources.get("cpu")),
        "memory_bytes": quantity(resources.get("memory")),
        "gpu": quantity(resources.get(gpu_resource)),
    }


def _container_requests(container: dict, gpu_resource: str) -> dict[str, Decimal]:
    resources = container.get("resources") or {}
    # The API server defaults a request to its limit when only the limit is given (always for extended
    # resources such as GPUs, which cannot be overcommitted).
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return _amounts(merged, gpu_resource)


def pod_requests(pod: dict, gpu_resource: str = "nvidia.com/gpu") -> dict[str, Decimal]:
    """What the scheduler reserves for a pod on its node."""
    spec = pod.get("spec") or {}
    total = {"cpu": Decimal(0), "memory_bytes": Decimal(0), "gpu": Decimal(0)}
    for container in spec.get("containers") or []:
        for key, value in _container_requests(container, gpu_resource).items():
            total[key] += value
    for container in spec.get("initContainers") or []:
        for key, value in _container_requests(container, gpu_resource).items():
            total[key] = max(total[key], value)
    for key, value in _amounts(spec.get("overhead") or {}, gpu_resource).items():
        total[key] += value
    return total


def _ready(node: dict) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _schedulable(node: dict) -> bool:
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return False
    taints = spec.get("taints") or []
    return not any(t.get("key") == "node.kubernetes.io/unschedulable" for t in taints)


def _number(value: Decimal, key: str) -> float | int:
    return int(value) if key == "memory_bytes" else float(round(value, 3))


def inventory_of(
    nodes: list[dict],
    pods: list[dict],
    *,
    gpu_resource: str = "nvidia.com/gpu",
    group_label: str = "",
    gpu_type_label: str = "",
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The inventory of a cluster from its nodes and (all namespaces') pods."""
    requested: dict[str, dict[str, Decimal]] = defaultdict(
        lambda: {"cpu": Decimal(0), "memory_bytes": Decimal(0), "gpu": Decimal(0)}
    )
    counts: dict[str, int] = defaultdict(int)
    for pod in pods:
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name or (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
            continue
        counts[node_name] += 1
        for key, value in pod_requests(pod, gpu_resource).items():
            requested[node_name][key] += value
    selector = node_selector or {}
    result = []
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        name = node["metadata"]["name"]
        labels = node["metadata"].get("labels") or {}
        allocatable = _amounts((node.get("status") or {}).get("allocatable") or {}, gpu_resource)
        used = requested[name]
        result.append(
            {
                "name": name,
                "group": labels.get(group_label, "") if group_label else "",
                "gpu_type": labels.get(gpu_type_label, "") if gpu_type_label else "",
                "ready": _ready(node),
                "schedulable": _schedulable(node),
                "selected": all(labels.get(k) == v for k, v in selector.items()),
                "allocatable": {k: _number(v, k) for k, v in allocatable.items()},
                "requested": {k: _number(v, k) for k, v in used.items()},
                "pods": counts[name],
            }
        )
    return {"nodes": result, "error": ""}


def usable(node: dict[str, Any]) -> bool:
    """A node the portal's pods can be scheduled on now."""
    return bool(node.get("ready") and node.get("schedulable") and node.get("selected", True))


def _sum(nodes: list[dict[str, Any]]) -> Capacity:
    free = {"cpu": 0.0, "memory_bytes": 0, "gpu": 0.0}
    total = {"cpu": 0.0, "memory_bytes": 0, "gpu": 0.0}
    rooms = []
    for node in nodes:
        allocatable, requested = node.get("allocatable") or {}, node.get("requested") or {}
        left = {}
        for key in free:
            have = allocatable.get(key) or 0
            total[key] += have
            # A node can be over-committed (requests above allocatable after a resize): it offers nothing.
            left[key] = max(have - (requested.get(key) or 0), 0)
            free[key] += left[key]
        whole = Resources.of(*(allocatable.get(key) or 0 for key in ("cpu", "memory_bytes", "gpu")))
        rooms.append(NodeRoom(Resources.of(left["cpu"], left["memory_bytes"], left["gpu"]), whole))
    return Capacity(
        cpu=round(free["cpu"], 3),
        memory_bytes=int(free["memory_bytes"]),
        gpu=round(free["gpu"], 3),
        total_cpu=round(total["cpu"], 3),
        total_memory_bytes=int(total["memory_bytes"]),
        total_gpu=round(total["gpu"], 3),
        nodes=tuple(rooms),
    )


def capacity_of(inventory: dict[str, Any]) -> Capacity | None:
    """Free and total resources over the usable nodes; None when the cluster's nodes were never read."""
    if not inventory or "nodes" not in inventory:
        return None
    return _sum([node for node in inventory["nodes"] if usable(node)])


def capacity_by_group(inventory: dict[str, Any]) -> dict[tuple[str, str], Capacity]:
    """Capacity per (resource group, GPU type) over the usable nodes: where a GPU of a given model is free."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for node in (inventory or {}).get("nodes") or []:
        if usable(node):
            groups[(node.get("group", ""), node.get("gpu_type", ""))].append(node)
    return {key: _sum(nodes) for key, nodes in sorted(groups.items())}
