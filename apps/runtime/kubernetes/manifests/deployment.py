"""kind "service", mode "deployment": a Deployment, a Service in front of it, and an autoscaling/v2
HorizontalPodAutoscaler when `service.max_replicas` > `min_replicas` (on cpu or memory utilisation)."""

from __future__ import annotations

from typing import Any

from apps.runtime.kubernetes.manifests.job import describe
from apps.runtime.kubernetes.manifests.meta import ManifestError, metadata, object_name, selector_labels
from apps.runtime.kubernetes.manifests.pod import command_of, pod_template
from apps.runtime.kubernetes.profile import ClusterProfile
from apps.runtime.workload import Phase, Workload, parse_service

ROLE, CONTAINER = "server", "server"
DEFAULT_UTILISATION = 80  # % of the request, when scale_target is not given


def readiness(ports: dict[str, int]) -> dict[str, Any]:
    """Ready once the first port accepts connections: any server, whatever its protocol."""
    return {"tcpSocket": {"port": next(iter(ports))}, "periodSeconds": 5}


def service_of(workload: Workload, profile: ClusterProfile, role: str) -> dict[str, Any]:
    ports = [{"name": name, "port": port, "targetPort": name} for name, port in workload.ports.items()]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(workload, profile),
        "spec": {"selector": selector_labels(workload, role), "ports": ports},
    }


def _autoscaler(workload: Workload, profile: ClusterProfile, service: dict[str, Any]) -> dict[str, Any]:
    metric = service["scale_metric"]
    if metric not in ("cpu", "memory"):
        raise ManifestError(
            f"service.scale_metric: {metric!r} needs mode kserve; a Deployment scales on cpu or memory utilisation"
        )
    # Utilisation is a share of the request: without one the autoscaler has nothing to compare with.
    if metric == "cpu" and workload.resources.cpu <= 0:
        raise ManifestError("resources.cpu: scaling on cpu needs a CPU request")
    if metric == "memory" and not workload.resources.memory_bytes:
        raise ManifestError("resources.memory: scaling on memory needs a memory request")
    target = {"type": "Utilization", "averageUtilization": service["scale_target"] or DEFAULT_UTILISATION}
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": metadata(workload, profile),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": object_name(workload)},
            "minReplicas": service["min_replicas"],
            "maxReplicas": service["max_replicas"],
            "metrics": [{"type": "Resource", "resource": {"name": metric, "target": target}}],
        },
    }


def build(workload: Workload, profile: ClusterProfile) -> list[dict[str, Any]]:
    service = parse_service(workload.service)
    if service["min_replicas"] < 1:
        raise ManifestError("service.min_replicas: scaling to zero needs mode kserve")
    if not workload.ports:
        raise ManifestError("ports: a service needs at least one port to serve on")
    template = pod_template(
        workload, profile, role=ROLE, container=CONTAINER, restart_policy="Always",
        command=command_of(workload) or None, ports=workload.ports, probe=readiness(workload.ports),
    )  # fmt: skip
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(workload, profile),
        "spec": {
            "replicas": service["min_replicas"],
            "selector": {"matchLabels": selector_labels(workload, ROLE)},
            "template": template,
        },
    }
    objects = [deployment, service_of(workload, profile, ROLE)]
    if service["max_replicas"] > service["min_replicas"]:
        objects.append(_autoscaler(workload, profile, service))
    return objects


def phase(obj: dict[str, Any]) -> tuple[Phase, str]:
    """A service runs while its Deployment is Available; it fails when its rollout exceeds the progress deadline
    (an image that cannot be pulled, a crash loop)."""
    conditions = {c.get("type"): c for c in (obj.get("status") or {}).get("conditions") or []}
    progressing, available = conditions.get("Progressing") or {}, conditions.get("Available") or {}
    if progressing.get("status") == "False" and progressing.get("reason") == "ProgressDeadlineExceeded":
        return Phase.FAILED, describe(progressing)
    if available.get("status") == "True":
        return Phase.RUNNING, ""
    failure = conditions.get("ReplicaFailure") or {}
    if failure.get("status") == "True":  # e.g. a quota refuses the pods
        return Phase.PENDING, describe(failure)
    return Phase.PENDING, ""
