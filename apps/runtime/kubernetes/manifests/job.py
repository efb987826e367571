"""kind "job": a batch/v1 Job running one pod (retried `workload.retries` times, killed after `timeout`)."""

from __future__ import annotations

from typing import Any

from apps.runtime.kubernetes.manifests.meta import metadata
from apps.runtime.kubernetes.manifests.pod import command_of, pod_template
from apps.runtime.kubernetes.profile import ClusterProfile
from apps.runtime.workload import Phase, Workload

API_VERSION, KIND = "batch/v1", "Job"
ROLE, CONTAINER = "job", "main"


def build(workload: Workload, profile: ClusterProfile) -> list[dict[str, Any]]:
    spec: dict[str, Any] = {
        # Indexed with one completion behaves like a plain Job, but its pod carries
        # batch.kubernetes.io/job-completion-index=0: the replica is "0", as in the local runtime.
        "completionMode": "Indexed",
        "completions": 1,
        "parallelism": 1,
        # Each retry is a new pod (restartPolicy Never), so every attempt keeps its own log and exit code.
        "backoffLimit": workload.retries,
    }
    if workload.timeout:
        spec["activeDeadlineSeconds"] = int(workload.timeout)
    spec["ttlSecondsAfterFinished"] = profile.ttl_seconds_after_finished
    spec["template"] = pod_template(
        workload, profile, role=ROLE, container=CONTAINER, restart_policy="Never", command=command_of(workload)
    )
    return [{"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata(workload, profile), "spec": spec}]


def true_conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """status.conditions whose status is "True", by type."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return {c.get("type", ""): c for c in conditions if str(c.get("status")) == "True"}


def describe(condition: dict[str, Any]) -> str:
    reason, message = condition.get("reason") or "", condition.get("message") or ""
    return f"{reason}: {message}" if reason and message else reason or message


def phase(obj: dict[str, Any]) -> tuple[Phase, str]:
    status, spec = obj.get("status") or {}, obj.get("spec") or {}
    conditions = true_conditions(obj)
    if "Complete" in conditions:
        return Phase.SUCCEEDED, ""
    if "Failed" in conditions:
        failed = conditions["Failed"]
        if failed.get("reason") == "DeadlineExceeded":
            return Phase.FAILED, f"timed out after {spec.get('activeDeadlineSeconds', '?')} s ({describe(failed)})"
        if failed.get("reason") == "BackoffLimitExceeded":
            tries = int(spec.get("backoffLimit") or 0) + 1
            return Phase.FAILED, f"failed {tries} time{'s' if tries > 1 else ''} ({describe(failed)})"
        return Phase.FAILED, describe(failed) or "failed"
    # `ready` counts pods that run (Kubernetes ≥ 1.24); `active` also counts pods still waiting to be scheduled.
    running = status["ready"] > 0 if status.get("ready") is not None else (status.get("active") or 0) > 0
    return (Phase.RUNNING, "") if running else (Phase.PENDING, "")
