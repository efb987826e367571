"""framework "ray": a KubeRay RayJob (ray.io/v1): a Ray cluster made for the job, the command as its entrypoint.

`workload.replicas`: {"head": 1, "worker": N} (no replicas = a head alone). KubeRay writes the `ray start`
commands of head and workers itself; a submitter pod (a Kubernetes Job) runs `ray job submit` and prints the
job's output, which is where the command's log lines appear. All three carry our labels. The cluster is deleted
`ttl_seconds_after_finished` after the job ends.
"""

from __future__ import annotations

import shlex
from typing import Any

from apps.runtime.kubernetes.manifests.meta import ManifestError, metadata
from apps.runtime.kubernetes.manifests.pod import command_of, pod_template
from apps.runtime.kubernetes.profile import ClusterProfile
from apps.runtime.models import Operator
from apps.runtime.workload import Phase, Workload

API_VERSION, KIND = "ray.io/v1", "RayJob"
OPERATOR = Operator.KUBERAY
# `ray job submit` only waits on the cluster: it needs little, whatever the job needs.
_SUBMITTER_RESOURCES = {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "512Mi"}}


def workers_of(workload: Workload) -> int:
    asked = workload.replicas or {"head": 1}
    for role, count in asked.items():
        if role not in ("head", "worker"):
            raise ManifestError(f"replicas.{role}: a Ray job knows the roles head, worker")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ManifestError(f"replicas.{role}: must be a whole number of 0 or more, not {count!r}")
    if asked.get("head", 1) != 1:
        raise ManifestError("replicas.head: a Ray cluster has exactly one head")
    return asked.get("worker", 0)


def entrypoint_of(workload: Workload) -> str:
    """The shell command Ray runs on the head: the workload's command, in its working directory."""
    command = command_of(workload)
    if not command:
        raise ManifestError("command: a Ray job needs a command (its entrypoint)")
    line = shlex.join(command)
    return f"cd {shlex.quote(workload.workdir)} && {line}" if workload.workdir else line


def build(workload: Workload, profile: ClusterProfile) -> list[dict[str, Any]]:
    workers = workers_of(workload)
    # Ray pods are not restarted in place: KubeRay replaces a lost worker, and a lost head fails the job
    # (or, with retries, starts a new cluster).
    head = pod_template(workload, profile, role="head", container="ray-head", restart_policy="Never", command=None)
    cluster: dict[str, Any] = {"headGroupSpec": {"rayStartParams": {"dashboard-host": "0.0.0.0"}, "template": head}}
    if workers:
        worker = pod_template(
            workload, profile, role="worker", container="ray-worker", restart_policy="Never", command=None
        )
        cluster["workerGroupSpecs"] = [
            {
                "groupName": "worker",
                "replicas": workers,
                "minReplicas": workers,
                "maxReplicas": workers,
                "rayStartParams": {},
                "template": worker,
            }
        ]
    submitter = pod_template(
        workload, profile, role="submitter", container="ray-job-submitter", restart_policy="Never",
        command=None, accelerators=False,
    )  # fmt: skip
    # It needs neither the job's resources nor its folders (the entrypoint runs on the head).
    container = submitter["spec"]["containers"][0]
    container["resources"] = _SUBMITTER_RESOURCES
    for key in ("volumeMounts", "workingDir"):
        container.pop(key, None)
    submitter["spec"].pop("volumes", None)
    spec: dict[str, Any] = {"entrypoint": entrypoint_of(workload), "shutdownAfterJobFinishes": True}
    spec["ttlSecondsAfterFinished"] = profile.ttl_seconds_after_finished
    if workload.timeout:
        spec["activeDeadlineSeconds"] = int(workload.timeout)
    if workload.retries:
        spec["backoffLimit"] = workload.retries  # each retry is a new Ray cluster
    spec["submitterPodTemplate"] = submitter
    spec["rayClusterSpec"] = cluster
    return [{"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata(workload, profile), "spec": spec}]


def phase(obj: dict[str, Any]) -> tuple[Phase, str]:
    """From status.jobDeploymentStatus (KubeRay's view: Initializing, Running, Complete, Failed, Retrying, …) and
    status.jobStatus (Ray's: PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED)."""
    status = obj.get("status") or {}
    deployment, job = status.get("jobDeploymentStatus") or "", status.get("jobStatus") or ""
    detail = ": ".join(part for part in (status.get("reason"), status.get("message")) if part)
    if job == "SUCCEEDED":
        return Phase.SUCCEEDED, ""
    if job in ("FAILED", "STOPPED"):
        return Phase.FAILED, f"ray job {job.lower()}{f' ({detail})' if detail else ''}"
    if deployment in ("Failed", "Complete"):  # Complete without SUCCEEDED: the submitter gave up
        return Phase.FAILED, detail or f"ray job ended as {deployment.lower()}"
    if deployment == "Retrying":
        return Phase.PENDING, f"retrying{f' ({detail})' if detail else ''}"
    if job == "RUNNING" or deployment == "Running":
        return Phase.RUNNING, ""
    return Phase.PENDING, detail
