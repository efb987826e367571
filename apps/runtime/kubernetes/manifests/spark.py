"""framework "spark": a SparkApplication (sparkoperator.k8s.io/v1beta2, kubeflow/spark-operator) running the command's
Python module or script as a PySpark application: spark-submit on the cluster starts the driver, which asks for the
executors, so the script's own master (local[N] when run locally) is not used.

`workload.replicas`: {"driver": 1, "executor": N} (N executors, 1 when not given). The driver and each executor get
the workload's CPU (whole cores) and memory, env, labels and folders. The image must hold Spark's entrypoint as well
as the task's code (e.g. the apache/spark-py image with the portal's code and requirements-train.txt added):
`mainApplicationFile` is `local://` inside it.
"""

from __future__ import annotations

import math
from typing import Any

from apps.runtime.kubernetes.manifests.meta import ManifestError, metadata, workload_annotations, workload_labels
from apps.runtime.kubernetes.manifests.pod import command_of, env_of, scheduling_of, volumes_of
from apps.runtime.kubernetes.profile import ClusterProfile
from apps.runtime.models import Operator
from apps.runtime.workload import Phase, Workload

API_VERSION, KIND = "sparkoperator.k8s.io/v1beta2", "SparkApplication"
OPERATOR = Operator.SPARK
SPARK_VERSION = "4.0.0"
APP_ROOT = "/app"  # the portal image's WORKDIR (Dockerfile), where `python -m apps…` finds its modules


def executors_of(workload: Workload) -> int:
    asked = workload.replicas or {}
    for role, count in asked.items():
        if role not in ("driver", "executor"):
            raise ManifestError(f"replicas.{role}: a Spark application knows the roles driver, executor")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ManifestError(f"replicas.{role}: must be a whole number of 0 or more, not {count!r}")
    if asked.get("driver", 1) != 1:
        raise ManifestError("replicas.driver: a Spark application has exactly one driver")
    executors = asked.get("executor", 1)
    if executors < 1:
        raise ManifestError("replicas.executor: a Spark application needs at least one executor")
    return executors


def application_of(workload: Workload) -> tuple[str, list[str]]:
    """(mainApplicationFile, arguments) from `python -m package.module args…` or `python script.py args…`."""
    command = command_of(workload)
    if len(command) >= 3 and command[0] == "python" and command[1] == "-m":
        return f"local://{APP_ROOT}/{command[2].replace('.', '/')}.py", command[3:]
    if len(command) >= 2 and command[0] == "python" and command[1].endswith(".py"):
        script = command[1]
        if not script.startswith("/"):
            script = f"{workload.workdir or APP_ROOT}/{script}"
        return f"local://{script}", command[2:]
    raise ManifestError("command: a Spark application runs a Python module (python -m …) or script (python x.py)")


def pod_of(workload: Workload, profile: ClusterProfile, role: str, mounts: list[dict[str, Any]]) -> dict[str, Any]:
    """A SparkPodSpec: cores, memory, labels, env, folders and placement of the driver or an executor."""
    resources = workload.resources
    if resources.gpu > 0:
        raise ManifestError("resources.gpu: the Spark template runs on CPUs only")
    pod: dict[str, Any] = {
        "cores": max(1, math.ceil(resources.cpu)),
        "memory": f"{max(512, (resources.memory_bytes or 0) // 2**20)}m",
        "labels": workload_labels(workload, role),
        "annotations": workload_annotations(workload),
        "env": env_of(workload, accelerators=False),
    }
    if mounts:
        pod["volumeMounts"] = mounts
    scheduling = scheduling_of(workload, profile, accelerators=False)
    for key in ("nodeSelector", "tolerations", "affinity", "schedulerName"):
        if scheduling.get(key):
            pod[key] = scheduling[key]
    return pod


def build(workload: Workload, profile: ClusterProfile) -> list[dict[str, Any]]:
    executors = executors_of(workload)
    main_file, arguments = application_of(workload)
    volumes, mounts = volumes_of(workload, profile)
    executor = pod_of(workload, profile, "executor", mounts)
    executor["instances"] = executors
    spec: dict[str, Any] = {
        "type": "Python",
        "mode": "cluster",
        "image": workload.image,
        "sparkVersion": SPARK_VERSION,
        "mainApplicationFile": main_file,
        "arguments": arguments,
        "restartPolicy": (
            {"type": "OnFailure", "onFailureRetries": workload.retries, "onSubmissionFailureRetries": workload.retries}
            if workload.retries
            else {"type": "Never"}
        ),
        "timeToLiveSeconds": profile.ttl_seconds_after_finished,
        "driver": pod_of(workload, profile, "driver", mounts),
        "executor": executor,
    }
    if volumes:
        spec["volumes"] = volumes
    return [{"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata(workload, profile), "spec": spec}]


_FAILED = {"FAILED", "SUBMISSION_FAILED", "FAILING", "INVALIDATING"}


def phase(obj: dict[str, Any]) -> tuple[Phase, str]:
    """From status.applicationState.state: SUBMITTED, RUNNING, COMPLETED, FAILED, SUBMISSION_FAILED, PENDING_RERUN,
    SUCCEEDING, FAILING, …; errorMessage says why it failed."""
    state_of = (obj.get("status") or {}).get("applicationState") or {}
    state, error = state_of.get("state") or "", state_of.get("errorMessage") or ""
    if state == "COMPLETED":
        return Phase.SUCCEEDED, ""
    if state in _FAILED - {"FAILING", "INVALIDATING"}:
        return Phase.FAILED, f"spark application {state.lower().replace('_', ' ')}{f' ({error})' if error else ''}"
    if state in ("RUNNING", "SUCCEEDING", "FAILING"):
        return Phase.RUNNING, ""
    return Phase.PENDING, error
