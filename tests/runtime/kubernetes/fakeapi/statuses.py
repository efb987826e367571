"""The status each simulated controller writes on its primary object, per stage ("created", "running",
"succeeded", "failed"), as the real ones write it: batch/v1 Job conditions (SuccessCriteriaMet + Complete,
FailureTarget + Failed), the training operator's Created/Running/Succeeded/Failed conditions and
replicaStatuses, Volcano's state.phase and counts, KubeRay's jobDeploymentStatus/jobStatus, Deployment
availability, StatefulSet ready replicas, KServe's Ready condition."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.runtime.kubernetes.fakeapi.store import Key, now_iso


def family_of(key: Key, kind: str) -> str:
    """Which controller looks after an object of this (group, plural) and kind."""
    if key[0] == "kubeflow.org":
        return "kubeflow"
    return {
        ("batch", "Job"): "job",
        ("batch.volcano.sh", "Job"): "volcano",
        ("ray.io", "RayJob"): "ray",
        ("apps", "Deployment"): "deployment",
        ("apps", "StatefulSet"): "statefulset",
        ("serving.kserve.io", "InferenceService"): "kserve",
    }[(key[0], kind)]


def _count(pods: list[dict], phase: str) -> int:
    return sum(1 for p in pods if p["status"].get("phase") == phase)


def _job_status(obj: dict, stage: str, pods: list[dict]) -> dict:
    status: dict[str, Any] = {"startTime": obj.get("status", {}).get("startTime") or now_iso()}
    if stage == "created":
        status.update(active=len(pods), ready=0)
    elif stage == "running":
        status.update(active=len(pods), ready=len(pods))
    elif stage == "succeeded":
        status.update(
            succeeded=len(pods),
            active=0,
            completionTime=now_iso(),
            conditions=[
                {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached"},
                {"type": "Complete", "status": "True", "reason": "CompletionsReached"},
            ],
        )
    else:
        message = "Job has reached the specified backoff limit"
        status.update(
            failed=max(_count(pods, "Failed"), 1),
            active=0,
            conditions=[
                {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded", "message": message},
                {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": message},
            ],
        )
    return status


def _kubeflow_status(obj: dict, stage: str, pods: list[dict]) -> dict:
    kind, name = obj["kind"], obj["metadata"]["name"]
    conditions = [
        {"type": "Created", "status": "True", "reason": f"{kind}Created", "message": f"{kind} {name} is created."}
    ]
    running = {"type": "Running", "status": "True", "reason": f"{kind}Running", "message": f"{kind} {name} is running."}
    replica_statuses: dict[str, dict] = {}
    for pod in pods:
        role = pod["metadata"]["labels"].get("training.kubeflow.org/replica-type", "worker").capitalize()
        counts = replica_statuses.setdefault(role, {})
        phase = pod["status"].get("phase")
        bucket = {"Running": "active", "Succeeded": "succeeded", "Failed": "failed"}.get(phase)
        if bucket:
            counts[bucket] = counts.get(bucket, 0) + 1
    if stage == "running":
        conditions.append(running)
    elif stage == "succeeded":
        conditions += [
            {**running, "status": "False"},
            {
                "type": "Succeeded",
                "status": "True",
                "reason": f"{kind}Succeeded",
                "message": f"{kind} {name} is successfully completed.",
            },
        ]
    elif stage == "failed":
        failed = [p for p in pods if p["status"].get("phase") == "Failed"]
        role = (
            failed[0]["metadata"]["labels"].get("training.kubeflow.org/replica-type", "worker").capitalize()
            if failed
            else "Worker"
        )
        conditions += [
            {**running, "status": "False"},
            {
                "type": "Failed",
                "status": "True",
                "reason": f"{kind}Failed",
                "message": f"{kind} {name} is failed because {len(failed) or 1} {role} replica(s) failed.",
            },
        ]
    status: dict[str, Any] = {"conditions": conditions, "replicaStatuses": replica_statuses, "startTime": now_iso()}
    if stage in ("succeeded", "failed"):
        status["completionTime"] = now_iso()
    return status


def _volcano_status(obj: dict, stage: str, pods: list[dict]) -> dict:
    phase = {"created": "Pending", "running": "Running", "succeeded": "Completed", "failed": "Failed"}[stage]
    return {
        "state": {"phase": phase, "lastTransitionTime": now_iso()},
        "minAvailable": obj["spec"].get("minAvailable", len(pods)),
        "pending": _count(pods, "Pending"),
        "running": _count(pods, "Running"),
        "succeeded": _count(pods, "Succeeded"),
        "failed": _count(pods, "Failed"),
    }


def _ray_status(obj: dict, stage: str, pods: list[dict]) -> dict:
    deployment, job = {
        "created": ("Initializing", "PENDING"),
        "running": ("Running", "RUNNING"),
        "succeeded": ("Complete", "SUCCEEDED"),
        "failed": ("Failed", "FAILED"),
    }[stage]
    status = {
        "jobDeploymentStatus": deployment,
        "jobStatus": job,
        "jobId": obj["metadata"]["name"],
        "startTime": now_iso(),
    }
    if stage == "failed":
        status.update(reason="AppFailed", message="Job entrypoint command failed with exit code 1")
    return status


def _deployment_status(obj: dict, stage: str, pods: list[dict]) -> dict:
    want = int(obj["spec"].get("replicas", 1))
    ready = want if stage == "running" else 0
    available = {
        "type": "Available",
        "status": "True" if ready else "False",
        "reason": "MinimumReplicasAvailable" if ready else "MinimumReplicasUnavailable",
        "message": "Deployment has minimum availability."
        if ready
        else "Deployment does not have minimum availability.",
    }
    return {
        "replicas": want,
        "readyReplicas": ready,
        "availableReplicas": ready,
        "updatedReplicas": want,
        "observedGeneration": 1,
        "conditions": [available, {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}],
    }


def _statefulset_status(obj: dict, stage: str, pods: list[dict]) -> dict:
    want = int(obj["spec"].get("replicas", 1))
    ready = want if stage == "running" else 0
    return {"replicas": want, "readyReplicas": ready, "availableReplicas": ready, "currentReplicas": want}


def _kserve_status(obj: dict, stage: str, pods: list[dict]) -> dict:
    ready = "True" if stage == "running" else "False"
    status: dict[str, Any] = {
        "conditions": [
            {"type": "PredictorReady", "status": ready},
            {"type": "Ready", "status": ready, **({} if ready == "True" else {"reason": "PredictorNotReady"})},
        ]
    }
    if stage == "running":
        status["url"] = f"http://{obj['metadata']['name']}.{obj['metadata']['namespace']}.example.com"
    return status


STATUS_WRITERS: dict[str, Callable[[dict, str, list[dict]], dict]] = {
    "job": _job_status,
    "kubeflow": _kubeflow_status,
    "volcano": _volcano_status,
    "ray": _ray_status,
    "deployment": _deployment_status,
    "statefulset": _statefulset_status,
    "kserve": _kserve_status,
}
