"""Each kind's builder: names, replica counts per framework, run policies, operators, services, notebooks."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from apps.runtime.kubernetes.manifests import ManifestError, build, object_name
from apps.runtime.workload import Resources
from tests.runtime.kubernetes.samples import (
    sample_distributed,
    sample_job,
    sample_notebook,
    sample_profile,
    sample_service,
)

DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def primary(workload, profile=None) -> dict:
    return build(workload, profile or sample_profile())[0]


def replicas(obj: dict, key: str) -> dict[str, int]:
    return {replica_type: spec["replicas"] for replica_type, spec in obj["spec"][key].items()}


@pytest.mark.parametrize("uid", ["task-42", "Task_42", "42", "dry-demo-My Pipeline-train" + "-x" * 40, "-"])
def test_names_are_dns_labels_derived_from_the_uid_alone(uid: str) -> None:
    name = object_name(sample_job(uid=uid))

    assert DNS_1035.match(name)
    assert len(name) <= 40
    assert name == object_name(sample_job(uid=uid, name="another name"))


def test_uids_that_clean_up_alike_keep_different_names() -> None:
    assert object_name(sample_job(uid="task-42")) == "task-42"
    assert object_name(sample_job(uid="Task_42")) != object_name(sample_job(uid="task-42"))


def test_a_job_has_retries_deadline_and_ttl() -> None:
    spec = primary(sample_job(retries=3, timeout=600))["spec"]

    assert (spec["backoffLimit"], spec["activeDeadlineSeconds"], spec["ttlSecondsAfterFinished"]) == (3, 600, 3600)
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 1, 1)
    assert "activeDeadlineSeconds" not in primary(sample_job(timeout=None))["spec"]


@pytest.mark.parametrize(
    ("asked", "expected"),
    [
        ({"worker": 3}, {"Master": 1, "Worker": 2}),
        ({"master": 1, "worker": 3}, {"Master": 1, "Worker": 3}),
        ({"worker": 1}, {"Master": 1}),
        ({}, {"Master": 1}),
    ],
)
def test_pytorch_always_has_one_master_and_the_world_size_asked_for(asked: dict, expected: dict) -> None:
    job = primary(sample_distributed("pytorch", replicas=asked))

    assert replicas(job, "pytorchReplicaSpecs") == expected


def test_pytorch_uses_the_operators_container_port_and_procs_per_node() -> None:
    job = primary(sample_distributed("pytorch", procs_per_replica=4))
    container = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]

    assert container["name"] == "pytorch"
    assert container["ports"] == [{"name": "pytorchjob-port", "containerPort": 23456}]
    assert job["spec"]["nprocPerNode"] == "4"
    assert "nprocPerNode" not in primary(sample_distributed("pytorch"))["spec"]


@pytest.mark.parametrize(
    ("framework", "asked", "message"),
    [
        ("pytorch", {"master": 2, "worker": 1}, r"^replicas\.master: PyTorchJob has at most one Master"),
        ("pytorch", {"launcher": 1}, r"^replicas\.launcher: pytorch knows the roles master, worker"),
        ("pytorch", {"worker": "2"}, r"^replicas\.worker: must be a whole number"),
        ("pytorch", {"master": 0}, r"^replicas: PyTorchJob needs at least one worker"),
        ("tf", {"chief": 1, "master": 1}, r"^replicas\.chief: TFJob has at most one Chief"),
        ("tf", {"ps": 2}, r"^replicas: a TFJob needs a chief or at least one worker"),
        ("mpi", {"launcher": 1}, r"^replicas\.worker: an MPI job needs at least one worker"),
        ("xgboost", {"ps": 1}, r"^replicas\.ps: xgboost knows the roles master, worker"),
        ("volcano", {"Master": 1}, r"^replicas\.Master: a Volcano task name"),
        ("ray", {"head": 2}, r"^replicas\.head: a Ray cluster has exactly one head"),
        ("ray", {"driver": 1}, r"^replicas\.driver: a Ray job knows the roles head, worker"),
    ],
)
def test_replicas_a_framework_cannot_run_are_refused(framework: str, asked: dict, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        build(sample_distributed(framework, replicas=asked), sample_profile())


def test_tf_keeps_its_roles_and_takes_master_as_chief() -> None:
    job = primary(sample_distributed("tf", replicas={"master": 1, "worker": 2, "evaluator": 1}))

    assert replicas(job, "tfReplicaSpecs") == {"Chief": 1, "Worker": 2, "Evaluator": 1}
    container = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert (container["name"], container["ports"][0]["containerPort"]) == ("tensorflow", 2222)


def test_paddle_keeps_workers_alone_and_xgboost_needs_its_master() -> None:
    assert replicas(primary(sample_distributed("paddle")), "paddleReplicaSpecs") == {"Worker": 2}
    xgboost = primary(sample_distributed("xgboost", replicas={"worker": 3}))
    assert replicas(xgboost, "xgbReplicaSpecs") == {"Master": 1, "Worker": 2}


@pytest.mark.parametrize("framework", ["mpi", "horovod", "deepspeed"])
def test_mpi_frameworks_run_mpirun_in_a_launcher_over_the_workers(framework: str) -> None:
    job = primary(sample_distributed(framework, resources=Resources(cpu=2, gpu=4, gpu_type="A100")))
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]

    assert job["kind"] == "MPIJob"
    assert replicas(job, "mpiReplicaSpecs") == {"Launcher": 1, "Worker": 2}
    assert job["spec"]["slotsPerWorker"] == 4  # one rank per GPU
    assert launcher["containers"][0]["command"][:4] == ["mpirun", "--allow-run-as-root", "-np", "8"]
    assert launcher["containers"][0]["command"][8:] == [
        "python",
        "-m",
        "apps.jobs.builtin_tasks.ddp_check",
        "--backend",
        "gloo",
    ]
    assert "command" not in worker["containers"][0]  # the operator keeps workers alive for mpirun
    # The launcher only runs mpirun: no GPUs, no GPU node, no devices visible.
    assert "nvidia.com/gpu" not in launcher["containers"][0]["resources"].get("limits", {})
    assert "gpu-type" not in launcher["nodeSelector"]
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"} in launcher["containers"][0]["env"]
    assert worker["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert worker["nodeSelector"]["gpu-type"] == "A100"


def test_slots_per_worker_can_be_asked_for() -> None:
    job = primary(sample_distributed("mpi", procs_per_replica=3))

    assert job["spec"]["slotsPerWorker"] == 3
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert launcher["command"][3] == "6"


def test_the_run_policy_has_deadline_retries_ttl_and_gang_scheduling_with_volcano() -> None:
    policy = primary(sample_distributed("pytorch", retries=2, timeout=900))["spec"]["runPolicy"]

    assert policy == {
        "cleanPodPolicy": "Running",
        "ttlSecondsAfterFinished": 3600,
        "activeDeadlineSeconds": 900,
        "backoffLimit": 2,
        "schedulingPolicy": {"minAvailable": 2, "queue": "research"},
    }
    without_volcano = sample_profile(operators=frozenset({"training-operator"}))
    assert "schedulingPolicy" not in primary(sample_distributed("pytorch"), without_volcano)["spec"]["runPolicy"]


def test_a_volcano_job_is_a_gang_in_the_clusters_queue() -> None:
    spec = primary(sample_distributed("volcano", timeout=900))["spec"]

    assert (spec["schedulerName"], spec["queue"], spec["minAvailable"]) == ("volcano", "research", 3)
    assert spec["plugins"] == {"env": [], "svc": []}
    assert [(t["name"], t["replicas"]) for t in spec["tasks"]] == [("master", 1), ("worker", 2)]
    assert spec["tasks"][0]["policies"] == [{"event": "TaskCompleted", "action": "CompleteJob"}]
    assert "policies" not in spec["tasks"][1]
    assert {t["template"]["spec"]["activeDeadlineSeconds"] for t in spec["tasks"]} == {900}
    assert {p["action"] for p in spec["policies"]} == {"TerminateJob"}
    assert "maxRetry" not in spec


def test_a_volcano_job_with_retries_restarts_up_to_max_retry() -> None:
    spec = primary(sample_distributed("volcano", retries=2, replicas={"worker": 4}))["spec"]

    assert spec["maxRetry"] == 2
    assert {p["action"] for p in spec["policies"]} == {"RestartJob"}
    assert "policies" not in spec["tasks"][0]  # a lone task has no leader to complete the job


def test_a_ray_job_runs_the_command_as_its_entrypoint() -> None:
    job = sample_distributed("ray", command=["{python}", "train.py", "--name", "it's"], retries=1)
    spec = primary(job)["spec"]

    assert spec["entrypoint"] == f"cd {job.workdir} && python train.py --name 'it'\"'\"'s'"
    assert (spec["shutdownAfterJobFinishes"], spec["backoffLimit"], spec["activeDeadlineSeconds"]) == (True, 1, 1800)
    group = spec["rayClusterSpec"]["workerGroupSpecs"][0]
    assert (group["groupName"], group["replicas"], group["minReplicas"], group["maxReplicas"]) == ("worker", 2, 2, 2)
    head = spec["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert "command" not in head  # KubeRay writes `ray start`
    submitter = spec["submitterPodTemplate"]["spec"]["containers"][0]
    assert submitter["resources"]["requests"] == {"cpu": "500m", "memory": "512Mi"}


def test_a_ray_job_alone_has_no_workers_and_needs_a_command() -> None:
    assert "workerGroupSpecs" not in primary(sample_distributed("ray", replicas={}))["spec"]["rayClusterSpec"]
    with pytest.raises(ManifestError, match=r"^command: a Ray job needs a command"):
        build(sample_distributed("ray", command=[]), sample_profile())


@pytest.mark.parametrize(
    ("workload", "operator"),
    [
        (sample_distributed("pytorch"), "Kubeflow training operator"),
        (sample_distributed("deepspeed"), "Kubeflow training operator"),
        (sample_distributed("volcano"), "Volcano"),
        (sample_distributed("ray"), "KubeRay"),
        (sample_service("kserve"), "KServe"),
    ],
)
def test_a_kind_whose_operator_is_missing_is_refused_naming_it(workload, operator: str) -> None:
    profile = sample_profile(operators=frozenset())

    with pytest.raises(ManifestError, match=rf"needs the {operator}, which cluster 'gpu-cluster' does not have"):
        build(workload, profile)


def test_unknown_frameworks_and_kinds_are_refused() -> None:
    with pytest.raises(ManifestError, match=r"^framework: 'jax' is not one of pytorch, tf"):
        build(replace(sample_distributed("pytorch"), framework="jax"), sample_profile())
    with pytest.raises(ManifestError, match=r"^kind: 'cron' is not one of job, distributed, service, notebook"):
        build(sample_job(kind="cron"), sample_profile())


def test_a_service_without_autoscaling_has_no_autoscaler() -> None:
    objects = build(sample_service(service={"min_replicas": 2, "max_replicas": 2}), sample_profile())

    assert [o["kind"] for o in objects] == ["Deployment", "Service"]
    assert objects[0]["spec"]["replicas"] == 2
    assert objects[1]["spec"]["ports"] == [{"name": "http", "port": 8080, "targetPort": "http"}]
    selector = objects[0]["spec"]["selector"]["matchLabels"]
    assert objects[1]["spec"]["selector"] == selector
    assert selector.items() <= objects[0]["spec"]["template"]["metadata"]["labels"].items()


@pytest.mark.parametrize(
    ("service", "fields", "message"),
    [
        ({"max_replicas": 3, "scale_metric": "rps"}, {}, r"^service\.scale_metric: 'rps' needs mode kserve"),
        ({"max_replicas": 3, "scale_metric": "memory"}, {"resources": Resources(cpu=1)}, r"^resources\.memory:"),
        ({"max_replicas": 3}, {"resources": Resources(cpu=0)}, r"^resources\.cpu: scaling on cpu needs a CPU request"),
        ({"min_replicas": 0, "max_replicas": 3}, {}, r"^service\.min_replicas: scaling to zero needs mode kserve"),
        ({}, {"ports": {}}, r"^ports: a service needs at least one port"),
        ({"mode": "kserve", "storage_uri": "s3://m"}, {}, r"^service\.model_format: an InferenceService needs one"),
    ],
)
def test_a_service_the_cluster_cannot_run_is_refused(service: dict, fields: dict, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        build(sample_service(service=service, **fields), sample_profile())


def test_an_inference_service_carries_model_scaling_canary_and_our_pod_labels() -> None:
    predictor = primary(sample_service("kserve"))["spec"]["predictor"]

    assert predictor["model"]["modelFormat"] == {"name": "sklearn"}
    assert predictor["model"]["storageUri"] == "s3://models/demo/iris/3"
    assert (predictor["minReplicas"], predictor["maxReplicas"]) == (0, 4)
    assert (predictor["scaleMetric"], predictor["scaleTarget"], predictor["canaryTrafficPercent"]) == (
        "concurrency",
        10,
        20,
    )
    assert predictor["labels"]["portal.io/workload"] == "svc-302"
    assert predictor["labels"]["portal.io/replica-type"] == "predictor"


def test_a_notebook_is_one_pod_behind_a_service_on_8888_by_default() -> None:
    statefulset, service = build(sample_notebook(ports={}), sample_profile())

    assert (statefulset["kind"], statefulset["spec"]["replicas"]) == ("StatefulSet", 1)
    assert statefulset["spec"]["serviceName"] == service["metadata"]["name"] == "nb-12"
    assert service["spec"]["ports"] == [{"name": "http", "port": 8888, "targetPort": "http"}]
    assert statefulset["spec"]["template"]["spec"]["restartPolicy"] == "Always"
