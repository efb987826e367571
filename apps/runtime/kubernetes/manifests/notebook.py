"""kind "notebook": a StatefulSet of one pod (a stable name and, with a PVC volume, a home that survives
restarts) and a Service in front of it on `ports` (default {"http": 8888})."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from apps.runtime.kubernetes.manifests.deployment import readiness, service_of
from apps.runtime.kubernetes.manifests.meta import metadata, object_name, selector_labels
from apps.runtime.kubernetes.manifests.pod import command_of, pod_template
from apps.runtime.kubernetes.profile import ClusterProfile
from apps.runtime.workload import Phase, Workload

ROLE, CONTAINER = "notebook", "notebook"
DEFAULT_PORTS = {"http": 8888}


def build(workload: Workload, profile: ClusterProfile) -> list[dict[str, Any]]:
    if not workload.ports:
        workload = replace(workload, ports=dict(DEFAULT_PORTS))
    template = pod_template(
        workload, profile, role=ROLE, container=CONTAINER, restart_policy="Always",
        command=command_of(workload) or None, ports=workload.ports, probe=readiness(workload.ports),
    )  # fmt: skip
    statefulset = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": metadata(workload, profile),
        "spec": {
            "replicas": 1,
            "serviceName": object_name(workload),
            "selector": {"matchLabels": selector_labels(workload, ROLE)},
            "template": template,
        },
    }
    return [statefulset, service_of(workload, profile, ROLE)]


def phase(obj: dict[str, Any]) -> tuple[Phase, str]:
    """Running while its pod is ready; a notebook never finishes by itself."""
    wanted = (obj.get("spec") or {}).get("replicas", 1)
    ready = (obj.get("status") or {}).get("readyReplicas") or 0
    if wanted == 0:
        return Phase.PENDING, "stopped (0 replicas)"
    return (Phase.RUNNING, "") if ready >= wanted else (Phase.PENDING, "")
