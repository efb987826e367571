"""The queue's priority levels on a cluster: Kubernetes PriorityClass objects, one per level, in the queue's order.

The portal's queue hands tasks out by the run's priority (higher first; apps/jobs/queue_policy.py). A task it hands
to a cluster keeps that order there: its pods (and its Volcano job or PodGroup) name the priority class of its run's
priority, so that the cluster's scheduler, when it orders what is pending (Volcano's queue, kube-scheduler's active
queue), follows the same order. The levels are clamped to LOWEST..HIGHEST: a priority beyond them shares the last
class. The classes never preempt (`preemptionPolicy: Never`): the portal's own preemption (borrowed tasks,
apps/jobs/borrowing.py) does not run on Kubernetes (docs/scheduling.md); a class only orders. `k8s/priorityclasses/`
ships these objects; a cluster names them in its manifests only when it says they are installed
(`Cluster.priority_classes`), since a pod naming a class the cluster lacks is refused.
"""

from __future__ import annotations

from typing import Any

LOWEST, HIGHEST = -2, 5
STEP = 1000  # class values LOWEST*STEP..HIGHEST*STEP: room between levels for a cluster's own classes


def level(priority: int) -> int:
    """The class level of a run's priority: the priority itself, within LOWEST..HIGHEST."""
    return max(LOWEST, min(HIGHEST, int(priority)))


def class_name(priority: int) -> str:
    """The PriorityClass a task of this run priority names, e.g. "portal-priority-1", "portal-priority-minus-2"."""
    n = level(priority)
    return f"portal-priority-{n}" if n >= 0 else f"portal-priority-minus-{-n}"


def priority_classes() -> list[dict[str, Any]]:
    """The PriorityClass objects of every level (what k8s/priorityclasses/priorityclasses.yaml holds)."""
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": class_name(n), "labels": {"app.kubernetes.io/part-of": "mlops-portal"}},
            "value": n * STEP,
            "globalDefault": False,
            "preemptionPolicy": "Never",
            "description": f"mlops-portal: tasks of runs of priority {_range(n)} (ordering only, never preempts)",
        }
        for n in range(LOWEST, HIGHEST + 1)
    ]


def _range(n: int) -> str:
    if n == LOWEST:
        return f"{n} or less"
    if n == HIGHEST:
        return f"{n} or more"
    return str(n)
