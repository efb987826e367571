"""A cluster's inventory (what the controller stores in `Cluster.inventory`) and the capacity read from it.

`inventory_of(nodes, pods, …)` is a pure function over node and pod dicts as the API returns them:

    {"nodes": [{"name", "group", "gpu_type", "ready", "schedulable", "selected",
                "allocatable": {"cpu", "memory_bytes", "gpu"}, "requested": {…}, "pods",
                "holders": {"<task run id>": {"cpu", "memory_bytes", "gpu"}}}], "error": ""}

`requested` sums the effective requests of the node's non-terminal pods (all namespaces): per pod the larger
of its containers' sum and its largest init container, plus its overhead, as the scheduler counts them (a
container with only limits requests its limits). `holders` (only on a node that has some) sums the same per
pipeline task of the portal's, from its pods' task-run label: a distributed task's pods may be on several nodes.
`selected` says whether the node matches the cluster's node selector, i.e. whether the portal's pods can land
there. `capacity_of(inventory)` sums allocatable − requested over ready, schedulable, selected nodes, each node a
`NodeRoom` with its name and holders (what the queue's node-level reservations read: docs/scheduling.md);
`capacity_by_group` does so per (resource group, GPU type).
"""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal, InvalidOperation
from typing import Any

from kubernetes.utils import parse_quantity

from apps.runtime.kubernetes.manifests.meta import LABEL_MANAGED, LABEL_TASK_RUN, MANAGED_BY
from apps.runtime.workload import Capacity, NodeRoom, task_run_id
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


def _zero() -> dict[str, Decimal]:
    return {"cpu": Decimal(0), "memory_bytes": Decimal(0), "gpu": Decimal(0)}


def task_run_of(pod: dict) -> str:
    """The id of the portal's task run a pod belongs to (its task-run label, on a pod the portal manages); "" for
    any other pod, and for a label value that is not an id."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    task_run = task_run_id(labels.get(LABEL_TASK_RUN))
    if labels.get(LABEL_MANAGED) != MANAGED_BY or task_run is None:
        return ""
    return str(task_run)


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
    requested: dict[str, dict[str, Decimal]] = defaultdict(_zero)
    held: dict[str, dict[str, dict[str, Decimal]]] = defaultdict(lambda: defaultdict(_zero))
    counts: dict[str, int] = defaultdict(int)
    for pod in pods:
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name or (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
            continue
        counts[node_name] += 1
        task_run = task_run_of(pod)
        for key, value in pod_requests(pod, gpu_resource).items():
            requested[node_name][key] += value
            if task_run:
                held[node_name][task_run][key] += value
    selector = node_selector or {}
    result = []
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        name = node["metadata"]["name"]
        labels = node["metadata"].get("labels") or {}
        allocatable = _amounts((node.get("status") or {}).get("allocatable") or {}, gpu_resource)
        used = requested[name]
        row: dict[str, Any] = {
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
        if held.get(name):
            # Only on a node that has some, so that the stored inventory stays small.
            row["holders"] = {
                task_run: {k: _number(v, k) for k, v in amounts.items()}
                for task_run, amounts in sorted(held[name].items(), key=lambda item: int(item[0]))
            }
        result.append(row)
    return {"nodes": result, "error": ""}


def usable(node: dict[str, Any]) -> bool:
    """A node the portal's pods can be scheduled on now."""
    return bool(node.get("ready") and node.get("schedulable") and node.get("selected", True))


def holders_of(node: dict[str, Any]) -> tuple[tuple[int, Resources], ...]:
    """A stored node's holders as `NodeRoom.holders`: (task run id, what it holds there), by id. An inventory written
    before holders were recorded has none; a key that is not an id, or amounts that are not numbers, are left out."""
    raw = node.get("holders")
    if not isinstance(raw, dict):
        return ()
    found = []
    for label, amounts in raw.items():
        if (task_run := task_run_id(label)) is None or not isinstance(amounts, dict):
            continue
        try:
            holds = Resources.of(*(amounts.get(key) or 0 for key in ("cpu", "memory_bytes", "gpu")))
        except (TypeError, ValueError):
            continue
        found.append((task_run, holds))
    return tuple(sorted(found, key=lambda holder: holder[0]))


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
        free_now = Resources.of(left["cpu"], left["memory_bytes"], left["gpu"])
        rooms.append(NodeRoom(free_now, whole, name=str(node.get("name") or ""), holders=holders_of(node)))
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
