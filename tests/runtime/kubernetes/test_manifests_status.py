"""Reading objects back: the phase of each primary kind from realistic statuses, the replica of each operator's
pods, and the resource table the client uses."""

from __future__ import annotations

import pytest

from apps.runtime.kubernetes.manifests import LABEL_ROLE, build, log_container, phase_of, replica_of, resource_of
from apps.runtime.workload import Phase
from tests.runtime.kubernetes.samples import SAMPLES, sample_profile

T = "2026-11-30T10:00:00Z"


def cond(type_: str, status: str = "True", reason: str = "", message: str = "") -> dict:
    return {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": T}


def obj(api_version: str, kind: str, status: dict, spec: dict | None = None) -> dict:
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}, "spec": spec or {}, "status": status}


def job(status: dict, **spec) -> dict:
    return obj("batch/v1", "Job", status, spec)


@pytest.mark.parametrize(
    ("status", "spec", "expected"),
    [
        ({}, {}, (Phase.PENDING, "")),
        ({"active": 1, "ready": 0, "startTime": T}, {}, (Phase.PENDING, "")),
        ({"active": 1, "ready": 1, "startTime": T}, {}, (Phase.RUNNING, "")),
        ({"active": 1, "startTime": T}, {}, (Phase.RUNNING, "")),  # before Kubernetes counted ready pods
        (
            {"succeeded": 1, "conditions": [cond("SuccessCriteriaMet"), cond("Complete")]},
            {},
            (Phase.SUCCEEDED, ""),
        ),
        (
            {
                "failed": 1,
                "conditions": [
                    cond(
                        "FailureTarget",
                        reason="DeadlineExceeded",
                        message="Job was active longer than specified deadline",
                    ),
                    cond("Failed", reason="DeadlineExceeded", message="Job was active longer than specified deadline"),
                ],
            },
            {"activeDeadlineSeconds": 600},
            (Phase.FAILED, "timed out after 600 s (DeadlineExceeded: Job was active longer than specified deadline)"),
        ),
        (
            {
                "failed": 3,
                "conditions": [
                    cond("Failed", reason="BackoffLimitExceeded", message="Job has reached the specified backoff limit")
                ],
            },
            {"backoffLimit": 2},
            (Phase.FAILED, "failed 3 times (BackoffLimitExceeded: Job has reached the specified backoff limit)"),
        ),
        (
            # Decided, pods still terminating: not over until Failed.
            {"active": 1, "ready": 0, "conditions": [cond("FailureTarget", reason="BackoffLimitExceeded")]},
            {},
            (Phase.PENDING, ""),
        ),
        ({"conditions": [cond("Complete", "False")], "active": 1, "ready": 1}, {}, (Phase.RUNNING, "")),
    ],
)
def test_a_jobs_phase_comes_from_its_conditions(status: dict, spec: dict, expected: tuple) -> None:
    assert phase_of(job(status, **spec)) == expected


@pytest.mark.parametrize("kind", ["PyTorchJob", "TFJob", "MPIJob", "PaddleJob", "XGBoostJob"])
@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ([], (Phase.PENDING, "")),
        ([cond("Created", reason="JobCreated", message="job default/x is created.")], (Phase.PENDING, "")),
        ([cond("Created"), cond("Running", reason="JobRunning", message="job is running.")], (Phase.RUNNING, "")),
        (
            [
                cond("Created"),
                cond("Running", "False"),
                cond("Restarting", reason="JobRestarting", message="1 Worker replica(s) failed."),
            ],
            (Phase.RUNNING, "restarting: JobRestarting: 1 Worker replica(s) failed."),
        ),
        ([cond("Created"), cond("Running", "False"), cond("Succeeded", reason="JobSucceeded")], (Phase.SUCCEEDED, "")),
        (
            [
                cond("Created"),
                cond("Running", "False"),
                cond(
                    "Failed", reason="JobFailed", message="job default/x is failed because 1 Master replica(s) failed."
                ),
            ],
            (Phase.FAILED, "JobFailed: job default/x is failed because 1 Master replica(s) failed."),
        ),
    ],
)
def test_a_kubeflow_jobs_phase_comes_from_the_operators_conditions(
    kind: str, conditions: list, expected: tuple
) -> None:
    status = {"conditions": conditions, "replicaStatuses": {"Worker": {"active": 1}}, "startTime": T}

    assert phase_of(obj("kubeflow.org/v1", kind, status)) == expected


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ({}, (Phase.PENDING, "")),
        (
            {"phase": "Pending", "reason": "PodGroupPending", "message": "2/3 tasks in gang unschedulable"},
            (Phase.PENDING, "PodGroupPending: 2/3 tasks in gang unschedulable"),
        ),
        ({"phase": "Running"}, (Phase.RUNNING, "")),
        ({"phase": "Restarting"}, (Phase.RUNNING, "restarting")),
        ({"phase": "Completing"}, (Phase.RUNNING, "")),
        ({"phase": "Completed"}, (Phase.SUCCEEDED, "")),
        (
            {"phase": "Failed", "reason": "PodFailed", "message": "max retry reached"},
            (Phase.FAILED, "failed (PodFailed: max retry reached)"),
        ),
        ({"phase": "Terminated"}, (Phase.FAILED, "terminated")),
        ({"phase": "Aborted"}, (Phase.FAILED, "aborted")),
    ],
)
def test_a_volcano_jobs_phase_comes_from_its_state(state: dict, expected: tuple) -> None:
    status = {"state": {**state, "lastTransitionTime": T}, "minAvailable": 3, "running": 3}

    assert phase_of(obj("batch.volcano.sh/v1alpha1", "Job", status)) == expected


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ({}, (Phase.PENDING, "")),
        ({"jobDeploymentStatus": "Initializing"}, (Phase.PENDING, "")),
        ({"jobDeploymentStatus": "Running", "jobStatus": "PENDING"}, (Phase.RUNNING, "")),
        ({"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}, (Phase.RUNNING, "")),
        ({"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}, (Phase.SUCCEEDED, "")),
        (
            {"jobDeploymentStatus": "Complete", "jobStatus": "FAILED", "reason": "AppFailed", "message": "exit code 1"},
            (Phase.FAILED, "ray job failed (AppFailed: exit code 1)"),
        ),
        (
            {
                "jobDeploymentStatus": "Failed",
                "reason": "DeadlineExceeded",
                "message": "The RayJob has passed the activeDeadlineSeconds.",
            },
            (Phase.FAILED, "DeadlineExceeded: The RayJob has passed the activeDeadlineSeconds."),
        ),
        ({"jobDeploymentStatus": "Retrying"}, (Phase.PENDING, "retrying")),
    ],
)
def test_a_ray_jobs_phase_comes_from_kuberay_and_ray(status: dict, expected: tuple) -> None:
    assert phase_of(obj("ray.io/v1", "RayJob", status)) == expected


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ([], (Phase.PENDING, "")),
        (
            [cond("Progressing", reason="ReplicaSetUpdated"), cond("Available", "False", "MinimumReplicasUnavailable")],
            (Phase.PENDING, ""),
        ),
        (
            [
                cond("Progressing", reason="NewReplicaSetAvailable"),
                cond("Available", reason="MinimumReplicasAvailable"),
            ],
            (Phase.RUNNING, ""),
        ),
        (
            [
                cond("Progressing", "False", "ProgressDeadlineExceeded", 'ReplicaSet "s-1" has timed out progressing.'),
                cond("Available", "False"),
            ],
            (Phase.FAILED, 'ProgressDeadlineExceeded: ReplicaSet "s-1" has timed out progressing.'),
        ),
        (
            [
                cond("ReplicaFailure", reason="FailedCreate", message="exceeded quota: compute"),
                cond("Available", "False"),
            ],
            (Phase.PENDING, "FailedCreate: exceeded quota: compute"),
        ),
    ],
)
def test_a_services_phase_comes_from_its_deployment(conditions: list, expected: tuple) -> None:
    assert phase_of(obj("apps/v1", "Deployment", {"conditions": conditions})) == expected


@pytest.mark.parametrize(
    ("replicas", "status", "expected"),
    [
        (1, {"replicas": 1, "readyReplicas": 1}, (Phase.RUNNING, "")),
        (1, {"replicas": 1}, (Phase.PENDING, "")),
        (0, {}, (Phase.PENDING, "stopped (0 replicas)")),
    ],
)
def test_a_notebooks_phase_comes_from_its_ready_pod(replicas: int, status: dict, expected: tuple) -> None:
    assert phase_of(obj("apps/v1", "StatefulSet", status, {"replicas": replicas})) == expected


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ({}, (Phase.PENDING, "")),
        (
            {
                "conditions": [
                    cond("PredictorReady", "False"),
                    cond("Ready", "False", "RevisionMissing", "Configuration is waiting"),
                ]
            },
            (Phase.PENDING, "RevisionMissing: Configuration is waiting"),
        ),
        (
            {"conditions": [cond("PredictorReady"), cond("Ready")], "url": "http://svc-302.team-a.example.com"},
            (Phase.RUNNING, ""),
        ),
        (
            {
                "conditions": [cond("Ready", "False")],
                "modelStatus": {
                    "transitionStatus": "BlockedByFailedLoad",
                    "states": {"activeModelState": "", "targetModelState": "FailedToLoad"},
                    "lastFailureInfo": {"reason": "ModelLoadFailed", "message": "no model found at s3://models/x"},
                },
            },
            (Phase.FAILED, "ModelLoadFailed: no model found at s3://models/x"),
        ),
    ],
)
def test_an_inference_services_phase_comes_from_ready_and_the_model(status: dict, expected: tuple) -> None:
    assert phase_of(obj("serving.kserve.io/v1beta1", "InferenceService", status)) == expected


@pytest.mark.parametrize("case", sorted(SAMPLES))
def test_every_new_primary_object_is_pending_and_every_object_a_known_resource(case: str) -> None:
    objects = build(SAMPLES[case](), sample_profile())

    assert phase_of(objects[0]) == (Phase.PENDING, "")
    for item in objects:
        resource = resource_of(item["apiVersion"], item["kind"])
        assert resource.namespaced


def test_a_kind_that_is_no_primary_object_is_an_error() -> None:
    with pytest.raises(LookupError, match="not a primary object of a workload: v1 Service"):
        phase_of(obj("v1", "Service", {}))


def pod(name: str, labels: dict | None = None, annotations: dict | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
    }


@pytest.mark.parametrize(
    ("item", "replica"),
    [
        (
            pod(
                "task-200-master-0",
                {"training.kubeflow.org/replica-type": "master", "training.kubeflow.org/replica-index": "0"},
            ),
            "master-0",
        ),
        (
            pod(
                "task-200-worker-1",
                {"training.kubeflow.org/replica-type": "worker", "training.kubeflow.org/replica-index": "1"},
            ),
            "worker-1",
        ),
        (
            pod(
                "task-202-launcher-x7k2p",
                {"training.kubeflow.org/replica-type": "launcher", "training.kubeflow.org/replica-index": "0"},
            ),
            "launcher-0",
        ),
        (pod("task-101-0-x7k2p", {"batch.kubernetes.io/job-completion-index": "0", LABEL_ROLE: "job"}), "0"),
        (pod("task-207-worker-1", {"volcano.sh/task-spec": "worker", "volcano.sh/job-name": "task-207"}), "worker-1"),
        (
            pod("task-207-master-0", {}, {"volcano.sh/task-spec": "master"}),
            "master-0",
        ),  # older Volcano: annotation only
        (pod("task-207-worker-3", {"volcano.sh/task-spec": "worker", "volcano.sh/task-index": "3"}), "worker-3"),
        (
            pod("task-208-raycluster-b7x2k-head-9fz2l", {"ray.io/node-type": "head", "ray.io/group": "headgroup"}),
            "head",
        ),
        (
            pod("task-208-raycluster-b7x2k-worker-qv4xm", {"ray.io/node-type": "worker", "ray.io/group": "worker"}),
            "worker-qv4xm",
        ),
        (
            pod("task-208-5xk2p", {"batch.kubernetes.io/job-name": "task-208", LABEL_ROLE: "submitter"}),
            "submitter-5xk2p",
        ),
        (pod("svc-301-7d9f8c6b5-x2x7k", {LABEL_ROLE: "server"}), "server-x2x7k"),
        (pod("nb-12-0", {LABEL_ROLE: "notebook"}), "notebook-0"),
        (pod("someone-elses-pod"), "someone-elses-pod"),
    ],
)
def test_the_replica_of_a_pod_comes_from_the_operators_labels(item: dict, replica: str) -> None:
    assert replica_of(item) == replica


def test_the_log_container_is_the_one_the_template_names() -> None:
    template = build(SAMPLES["distributed-mpi"](), sample_profile())[0]["spec"]["mpiReplicaSpecs"]["Launcher"][
        "template"
    ]
    launcher = {"metadata": {"name": "l", **template["metadata"]}, "spec": template["spec"]}

    assert log_container(launcher) == "mpi"
    assert log_container(pod("p")) is None


def test_the_resource_table_knows_plural_and_scope() -> None:
    assert resource_of("kubeflow.org/v1", "PyTorchJob").plural == "pytorchjobs"
    assert resource_of("batch.volcano.sh/v1alpha1", "Job").plural == "jobs"
    assert resource_of("batch.volcano.sh/v1alpha1", "Job").group == "batch.volcano.sh"
    assert resource_of("autoscaling/v2", "HorizontalPodAutoscaler").version == "v2"
    assert resource_of("v1", "Pod").group == ""
    for core in ("Pod", "Event", "Secret", "Service", "ConfigMap"):  # ConfigMap: a DeepSpeed strategy's config
        assert resource_of("v1", core).namespaced
    assert not resource_of("v1", "Node").namespaced
    with pytest.raises(LookupError, match="not a resource the portal creates or reads: v1 LimitRange"):
        resource_of("v1", "LimitRange")
