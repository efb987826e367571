"""framework "volcano": a Volcano Job (batch.volcano.sh/v1alpha1), gang-scheduled in the cluster's queue.

`workload.replicas` maps task names to counts, e.g. {"master": 1, "worker": 3} (no replicas = {"worker": 1}); all
of them start together (minAvailable = the sum) or none does. Volcano's env and svc plugins give each pod
VC_TASK_INDEX and VC_<TASK>_HOSTS / VC_<TASK>_NUM, and every pod a DNS name <job>-<task>-<index>.<job>.
When there is a master, chief or launcher task, its completion completes the job (its peers may be servers that
never exit). Without retries a failed or evicted pod ends the job; with retries the whole job restarts, up to
`retries` times. Volcano has no job deadline, so `timeout` is each pod's activeDeadlineSeconds.
"""

from __future__ import annotations

import re
from typing import Any

from apps.runtime.kubernetes.manifests.meta import ManifestError, metadata
from apps.runtime.kubernetes.manifests.pod import command_of, pod_template, priority_class_of
from apps.runtime.kubernetes.profile import ClusterProfile
from apps.runtime.models import Operator
from apps.runtime.workload import Phase, Workload

API_VERSION, KIND = "batch.volcano.sh/v1alpha1", "Job"
OPERATOR = Operator.VOLCANO
CONTAINER = "main"
_LEADERS = ("master", "chief", "launcher")
# Task names become part of pod names, host names and env names (VC_<TASK>_HOSTS).
_TASK_RE = re.compile(r"^[a-z]([a-z0-9-]{0,18}[a-z0-9])?$")


def tasks_of(workload: Workload) -> dict[str, int]:
    asked = workload.replicas or {"worker": 1}
    tasks = {}
    for name, count in sorted(asked.items(), key=lambda kv: (kv[0] not in _LEADERS, list(asked).index(kv[0]))):
        if not _TASK_RE.match(name):
            raise ManifestError(f"replicas.{name}: a Volcano task name is 1-20 lower-case letters, digits and '-'")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ManifestError(f"replicas.{name}: must be a whole number of 0 or more, not {count!r}")
        if count:
            tasks[name] = count
    if not tasks:
        raise ManifestError("replicas: a Volcano job needs at least one replica")
    return tasks


def build(workload: Workload, profile: ClusterProfile) -> list[dict[str, Any]]:
    tasks = tasks_of(workload)
    on_failure = "RestartJob" if workload.retries else "TerminateJob"
    leader = next((name for name in tasks if name in _LEADERS), None) if len(tasks) > 1 else None
    task_specs = []
    for name, count in tasks.items():
        template = pod_template(
            workload, profile, role=name, container=CONTAINER, restart_policy="Never", command=command_of(workload),
            by_volcano=True,
        )  # fmt: skip
        if workload.timeout:
            template["spec"]["activeDeadlineSeconds"] = int(workload.timeout)
        task: dict[str, Any] = {"name": name, "replicas": count, "template": template}
        if name == leader:
            task["policies"] = [{"event": "TaskCompleted", "action": "CompleteJob"}]
        task_specs.append(task)
    spec: dict[str, Any] = {
        "schedulerName": "volcano",
        "queue": profile.volcano_queue,
        "minAvailable": sum(tasks.values()),
        "plugins": {"env": [], "svc": []},
        "policies": [{"event": "PodFailed", "action": on_failure}, {"event": "PodEvicted", "action": on_failure}],
    }
    if name := priority_class_of(workload, profile):
        # The job's PodGroup takes it: Volcano orders the jobs pending in a queue by it, as the portal's queue did.
        spec["priorityClassName"] = name
    if workload.retries:
        # Volcano reads an absent (or zero) maxRetry as 3; without retries no policy restarts anything.
        spec["maxRetry"] = workload.retries
    spec["ttlSecondsAfterFinished"] = profile.ttl_seconds_after_finished
    spec["tasks"] = task_specs
    return [{"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata(workload, profile), "spec": spec}]


_PHASES = {
    "Pending": Phase.PENDING,
    "Running": Phase.RUNNING,
    "Restarting": Phase.RUNNING,
    "Completing": Phase.RUNNING,  # done, its pods being cleaned up
    "Aborting": Phase.RUNNING,
    "Terminating": Phase.RUNNING,
    "Completed": Phase.SUCCEEDED,
    "Aborted": Phase.FAILED,
    "Terminated": Phase.FAILED,
    "Failed": Phase.FAILED,
}


def phase(obj: dict[str, Any]) -> tuple[Phase, str]:
    """From status.state.phase (Pending, Running, Restarting, Completing, Completed, Aborting, Aborted,
    Terminating, Terminated, Failed)."""
    state = (obj.get("status") or {}).get("state") or {}
    volcano_phase = state.get("phase") or "Pending"
    result = _PHASES.get(volcano_phase, Phase.PENDING)
    detail = ": ".join(part for part in (state.get("reason"), state.get("message")) if part)
    if result is Phase.FAILED:
        return result, f"{volcano_phase.lower()}{f' ({detail})' if detail else ''}"
    if volcano_phase in ("Restarting", "Aborting", "Terminating"):
        return result, f"{volcano_phase.lower()}{f' ({detail})' if detail else ''}"
    return result, detail  # e.g. why the gang is still pending
