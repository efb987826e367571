"""Which module builds a workload and reads an object's status; which replica a pod is."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from apps.runtime.kubernetes.manifests import deployment, job, kserve, kubeflow, notebook, ray, spark, volcano
from apps.runtime.kubernetes.manifests.meta import ANNOTATION_DEFAULT_CONTAINER, LABEL_ROLE, ManifestError
from apps.runtime.kubernetes.profile import ClusterProfile
from apps.runtime.models import Operator
from apps.runtime.workload import Phase, Workload, parse_service

KINDS = ("job", "distributed", "service", "notebook")
FRAMEWORKS = (*kubeflow.FRAMEWORKS, "volcano", "ray", "spark")


def _require(profile: ClusterProfile, operator: str, what: str) -> None:
    if operator not in profile.operators:
        installed = ", ".join(sorted(profile.operators)) or "none"
        raise ManifestError(
            f"{what} needs the {Operator(operator).label}, which cluster {profile.name!r} does not have"
            f" (installed: {installed})"
        )


def build(workload: Workload, profile: ClusterProfile) -> list[dict[str, Any]]:
    """Every object to apply for `workload` on the cluster `profile` describes, the primary object first."""
    if workload.kind == "job":
        return job.build(workload, profile)
    if workload.kind == "distributed":
        framework = workload.framework
        if framework in kubeflow.FRAMEWORKS:
            _require(profile, kubeflow.OPERATOR, f"framework {framework!r}")
            return kubeflow.build(workload, profile)
        if framework == "volcano":
            _require(profile, volcano.OPERATOR, "framework 'volcano'")
            return volcano.build(workload, profile)
        if framework == "ray":
            _require(profile, ray.OPERATOR, "framework 'ray'")
            return ray.build(workload, profile)
        if framework == "spark":
            _require(profile, spark.OPERATOR, "framework 'spark'")
            return spark.build(workload, profile)
        raise ManifestError(f"framework: {framework!r} is not one of {', '.join(FRAMEWORKS)}")
    if workload.kind == "service":
        if parse_service(workload.service)["mode"] == "kserve":
            _require(profile, kserve.OPERATOR, "service.mode 'kserve'")
            return kserve.build(workload, profile)
        return deployment.build(workload, profile)
    if workload.kind == "notebook":
        return notebook.build(workload, profile)
    raise ManifestError(f"kind: {workload.kind!r} is not one of {', '.join(KINDS)}")


_PHASES: dict[tuple[str, str], Callable[[dict[str, Any]], tuple[Phase, str]]] = {
    (job.API_VERSION, job.KIND): job.phase,
    **{(kubeflow.API_VERSION, kind): kubeflow.phase for kind in kubeflow.KINDS},
    (volcano.API_VERSION, volcano.KIND): volcano.phase,
    (ray.API_VERSION, ray.KIND): ray.phase,
    (spark.API_VERSION, spark.KIND): spark.phase,
    ("apps/v1", "Deployment"): deployment.phase,
    ("apps/v1", "StatefulSet"): notebook.phase,
    (kserve.API_VERSION, kserve.KIND): kserve.phase,
}


def phase_of(obj: dict[str, Any]) -> tuple[Phase, str]:
    """The workload's phase and a reason, from its primary object (as the API returns it, status included)."""
    key = (obj.get("apiVersion", ""), obj.get("kind", ""))
    try:
        reader = _PHASES[key]
    except KeyError:
        raise LookupError(f"not a primary object of a workload: {key[0]} {key[1]}") from None
    return reader(obj)


_TRAILING_INDEX = re.compile(r"-(\d+)$")


def replica_of(pod: dict[str, Any]) -> str:
    """The replica a pod is, as logs name it: "master-0", "worker-1", "head", "0", …

    From the labels the operators put on their pods: the training operator's replica type and index, an indexed
    Job's completion index, Volcano's task (the index ends the pod's name), KubeRay's node type (a worker has
    no index: the pod name's random suffix tells workers apart). Otherwise our role label and the end of the pod
    name (a StatefulSet's ordinal, a Deployment pod's suffix); the pod name when nothing else is known."""
    meta = pod.get("metadata") or {}
    labels, annotations, name = meta.get("labels") or {}, meta.get("annotations") or {}, meta.get("name") or ""
    replica_type = labels.get("training.kubeflow.org/replica-type")
    if replica_type:
        return f"{replica_type.lower()}-{labels.get('training.kubeflow.org/replica-index', '0')}"
    if "batch.kubernetes.io/job-completion-index" in labels:
        return labels["batch.kubernetes.io/job-completion-index"]
    task = labels.get("volcano.sh/task-spec") or annotations.get("volcano.sh/task-spec")
    if task:
        index = labels.get("volcano.sh/task-index") or (_TRAILING_INDEX.search(name) or [None, "0"])[1]
        return f"{task}-{index}"
    node_type = labels.get("ray.io/node-type")
    if node_type == "head":
        return "head"
    if node_type:
        return f"{labels.get('ray.io/group') or node_type}-{name.rpartition('-')[2]}"
    role = labels.get(LABEL_ROLE)
    if role:
        suffix = name.rpartition("-")[2] if "-" in name else ""
        return f"{role}-{suffix}" if suffix else role
    return name


def log_container(pod: dict[str, Any]) -> str | None:
    """The container whose output is the workload's log (the operators add others: an MPI launcher's
    kubectl-delivery, KServe's queue-proxy); None when the pod does not say."""
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_DEFAULT_CONTAINER)
