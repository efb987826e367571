"""A workload's status from what the cluster says: the primary object's phase (through the builders'
`phase_of`), sharpened by its pods and their Events.

Pure functions over API dicts, so every reason can be tested from a realistic object:
- waiting:  ImagePullBackOff / ErrImagePull (with the image), Unschedulable (with the scheduler's message),
            CreateContainerConfigError, CrashLoopBackOff …
- failed:   OOMKilled, Evicted (with the kubelet's message), the exit code of the replica that failed
- replicas: replica → pod phase (what `Status.replicas` reports)
- image digest: the main container's `imageID`, the image that really ran (a tag can move; this cannot)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from apps.runtime.kubernetes.manifests import log_container
from apps.runtime.workload import Phase

# Waiting reasons that never pass by themselves: past a grace period the workload fails with them.
FATAL_WAITING = {"ImagePullBackOff", "ErrImagePull", "InvalidImageName", "CreateContainerConfigError"}
# Waiting reasons worth showing while a workload is pending (the usual ContainerCreating is not).
TELLING_WAITING = FATAL_WAITING | {"CrashLoopBackOff", "CreateContainerError", "RunContainerError"}
PULL_ERRORS = {"ImagePullBackOff", "ErrImagePull", "InvalidImageName"}


@dataclass
class Observed:
    """What the controller makes of a workload: phase, reason, exit code and per-replica pod phases."""

    phase: Phase
    reason: str = ""
    exit_code: int | None = None
    replicas: dict[str, str] = field(default_factory=dict)
    fatal: bool = False  # waiting on something that will not pass (see FATAL_WAITING), past the grace period
    image_digest: str = ""  # the main container's resolved image, once a pod has been started from it


def _containers(pod: dict) -> list[dict]:
    status = pod.get("status") or {}
    return [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]


def _image_of(pod: dict, container: str) -> str:
    spec = pod.get("spec") or {}
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        if c.get("name") == container:
            return c.get("image", "")
    return ""


def container_started(pod: dict) -> bool:
    """Whether a container of the pod has started (before that there is no log to read)."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        state = status.get("state") or {}
        if "running" in state or "terminated" in state:
            return True
    return False


def image_digest(pod: dict) -> str:
    """The resolved image of the pod's main container (`imageID`, e.g. docker.io/library/python@sha256:…): the
    container the workload's log comes from, else the first one (the builders put the task's container first;
    operators add sidecars after it). Empty until the kubelet has created the container."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    main = log_container(pod)
    if main is None:
        containers = (pod.get("spec") or {}).get("containers") or []
        main = containers[0].get("name") if containers else None
    for status in statuses:
        if main is None or status.get("name") == main:
            return status.get("imageID") or ""
    return ""


def waiting_problem(pod: dict) -> tuple[str, str]:
    """(waiting reason, message) of a pod that cannot start, or ("", "")."""
    status = pod.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            reason = condition.get("reason") or "Unschedulable"
            return reason, condition.get("message") or "no node fits the pod"
    for container in _containers(pod):
        waiting = (container.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason", "")
        if reason in TELLING_WAITING:
            message = waiting.get("message") or ""
            image = container.get("image") or _image_of(pod, container.get("name", ""))
            if reason in PULL_ERRORS and image and image not in message:
                message = f"{message} (image {image})".strip()
            return reason, message or reason
    return "", ""


def failure(pod: dict) -> tuple[str, int | None]:
    """(why a failed pod failed, its exit code): Evicted, OOMKilled or the exit code."""
    status = pod.get("status") or {}
    if status.get("reason") == "Evicted":
        return f"Evicted: {status.get('message') or 'the node was short of resources'}", None
    for container in _containers(pod):
        terminated = (container.get("state") or {}).get("terminated") or {}
        code = terminated.get("exitCode")
        if not terminated or code in (0, None):
            continue
        reason = terminated.get("reason") or ""
        if reason == "OOMKilled":
            return f"OOMKilled: container {container.get('name')} exceeded its memory limit (exit code {code})", code
        text = f"container {container.get('name')} exited with code {code}"
        if reason and reason != "Error":
            text += f" ({reason})"
        if terminated.get("message"):
            text += f": {terminated['message']}"
        return text, code
    if status.get("phase") == "Failed":
        message = status.get("message") or status.get("reason") or "failed"
        return message, None
    return "", None


def event_reason(events: list[dict]) -> str:
    """The latest Warning among a pod's Events, e.g. "FailedScheduling: 0/3 nodes are available: …"."""
    warnings = [e for e in events if e.get("type") == "Warning"]
    if not warnings:
        return ""
    latest = max(warnings, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or e.get("firstTimestamp") or "")
    return f"{latest.get('reason', '')}: {latest.get('message', '')}".strip(": ")


def age_seconds(obj: dict, now: datetime | None = None) -> float:
    stamp = (obj.get("metadata") or {}).get("creationTimestamp")
    if not stamp:
        return 0.0
    created = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return ((now or datetime.now(UTC)) - created).total_seconds()


def observe(
    primary: dict,
    pods: list[dict],
    *,
    phase_of: Callable[[dict], tuple[Phase, str]],
    replica_of: Callable[[dict], str],
    events: dict[str, list[dict]] | None = None,
    pull_grace: float = 120.0,
    now: datetime | None = None,
) -> Observed:
    """The workload's status: the primary's phase, with reasons from its pods (and their Events)."""
    phase, reason = phase_of(primary)
    events = events or {}
    ordered = sorted(pods, key=lambda p: (replica_of(p), (p.get("metadata") or {}).get("creationTimestamp") or ""))
    replicas = {replica_of(p): (p.get("status") or {}).get("phase") or "Pending" for p in ordered}
    # Every replica runs the same image; the first pod that reports one says which.
    digest = next((d for d in map(image_digest, ordered) if d), "")
    observed = Observed(phase, reason, replicas=replicas, image_digest=digest)
    if phase == Phase.PENDING:
        for pod in ordered:
            problem, message = waiting_problem(pod)
            if not problem and (pod.get("status") or {}).get("phase") in (None, "", "Pending"):
                # Nothing in the pod's status yet: the scheduler's or kubelet's Events may already say why.
                told = event_reason(events.get(pod["metadata"]["name"], []))
                if told:
                    observed.reason = f"replica {replica_of(pod)}: {told}"
                    break
            if problem:
                observed.reason = f"replica {replica_of(pod)}: {problem}: {message}"
                observed.fatal = problem in FATAL_WAITING and age_seconds(pod, now) >= pull_grace
                break
    elif phase == Phase.RUNNING:
        observed.reason = ""
    elif phase == Phase.SUCCEEDED:
        observed.exit_code = 0
    elif phase == Phase.FAILED:
        failed = [p for p in ordered if (p.get("status") or {}).get("phase") == "Failed"]
        # The latest failure is the one that ended the workload (earlier ones were retried).
        failed.sort(key=_finished_at)
        for pod in reversed(failed):
            text, code = failure(pod)
            if text:
                observed.reason = f"replica {replica_of(pod)}: {text}"
                if reason and reason not in text:
                    observed.reason += f" — {reason}"
                observed.exit_code = code if code is not None else 1
                break
        else:
            observed.exit_code = 1
    return observed


def _finished_at(pod: dict) -> str:
    latest = ""
    for container in _containers(pod):
        terminated = (container.get("state") or {}).get("terminated") or {}
        latest = max(latest, terminated.get("finishedAt") or "")
    return latest or (pod.get("metadata") or {}).get("creationTimestamp") or ""
