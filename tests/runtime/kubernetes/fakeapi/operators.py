"""What the operators create at once for each workload kind: its pods, named and labelled as the real ones
name and label them (the Job controller, the Kubeflow training operator, Volcano, KubeRay, the Deployment and
StatefulSet controllers, KServe)."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable

KUBEFLOW = {
    "PyTorchJob": ("pytorchReplicaSpecs", "pytorchjob-controller"),
    "TFJob": ("tfReplicaSpecs", "tfjob-controller"),
    "MPIJob": ("mpiReplicaSpecs", "mpijob-controller"),
    "PaddleJob": ("paddleReplicaSpecs", "paddlejob-controller"),
    "XGBoostJob": ("xgbReplicaSpecs", "xgboostjob-controller"),
}
MASTER_ROLES = {"master", "chief", "launcher"}


def suffix(n: int = 5) -> str:
    return uuid.uuid4().hex[:n]


def pods_for(api_version: str, kind: str) -> Callable[[dict], list] | None:
    """The pods an object's operator creates for it (name, template, labels, annotations), or None for a kind
    no operator acts on."""
    group = api_version.rpartition("/")[0]
    if (group, kind) == ("batch", "Job"):
        return _job_pods
    if group == "kubeflow.org" and kind in KUBEFLOW:
        return _kubeflow_pods
    if (group, kind) == ("batch.volcano.sh", "Job"):
        return _volcano_pods
    if (group, kind) == ("ray.io", "RayJob"):
        return _ray_pods
    if (group, kind) == ("apps", "Deployment"):
        return _deployment_pods
    if (group, kind) == ("apps", "StatefulSet"):
        return _statefulset_pods
    if (group, kind) == ("serving.kserve.io", "InferenceService"):
        return _kserve_pods
    return None


def _job_pods(job: dict) -> list:
    spec, meta = job["spec"], job["metadata"]
    count = int(spec.get("parallelism") or 1)
    indexed = spec.get("completionMode") == "Indexed"
    pods = []
    for index in range(count):
        labels = {
            "batch.kubernetes.io/controller-uid": meta["uid"],
            "batch.kubernetes.io/job-name": meta["name"],
            "controller-uid": meta["uid"],
            "job-name": meta["name"],
        }
        annotations = {}
        name = f"{meta['name']}-{suffix()}"
        if indexed:
            labels["batch.kubernetes.io/job-completion-index"] = str(index)
            annotations["batch.kubernetes.io/job-completion-index"] = str(index)
            name = f"{meta['name']}-{index}-{suffix()}"
        pods.append((name, spec["template"], labels, annotations))
    return pods


def _kubeflow_pods(job: dict) -> list:
    field, operator = KUBEFLOW[job["kind"]]
    name = job["metadata"]["name"]
    pods = []
    for rtype, rspec in (job["spec"].get(field) or {}).items():
        role = rtype.lower()
        for index in range(int(rspec.get("replicas", 1))):
            labels = {
                "training.kubeflow.org/job-name": name,
                "training.kubeflow.org/operator-name": operator,
                "training.kubeflow.org/replica-type": role,
                "training.kubeflow.org/replica-index": str(index),
            }
            if role in MASTER_ROLES and index == 0:
                labels["training.kubeflow.org/job-role"] = "master"
            pods.append((f"{name}-{role}-{index}", rspec["template"], labels, {}))
    return pods


def _volcano_pods(job: dict) -> list:
    meta = job["metadata"]
    pods = []
    for task in job["spec"].get("tasks") or []:
        for index in range(int(task.get("replicas", 1))):
            labels = {
                "volcano.sh/job-name": meta["name"],
                "volcano.sh/job-namespace": meta["namespace"],
                "volcano.sh/queue-name": job["spec"].get("queue", "default"),
                "volcano.sh/task-spec": task["name"],
                "volcano.sh/task-index": str(index),
            }
            annotations = {
                "volcano.sh/job-name": meta["name"],
                "volcano.sh/task-spec": task["name"],
                "volcano.sh/task-index": str(index),
                "scheduling.k8s.io/group-name": f"{meta['name']}-{meta['uid']}",
            }
            pods.append((f"{meta['name']}-{task['name']}-{index}", task["template"], labels, annotations))
    return pods


def _ray_pods(job: dict) -> list:
    cluster_spec = job["spec"].get("rayClusterSpec") or {}
    cluster = f"{job['metadata']['name']}-raycluster-{suffix()}"
    head = cluster_spec.get("headGroupSpec") or {}
    base = {"ray.io/cluster": cluster, "app.kubernetes.io/created-by": "kuberay-operator"}
    pods = [
        (
            f"{cluster}-head-{suffix()}",
            head.get("template") or {},
            {**base, "ray.io/node-type": "head", "ray.io/group": "headgroup", "ray.io/is-ray-node": "yes"},
            {},
        )
    ]
    for group in cluster_spec.get("workerGroupSpecs") or []:
        for _index in range(int(group.get("replicas", 1))):
            labels = {**base, "ray.io/node-type": "worker", "ray.io/group": group["groupName"]}
            pods.append((f"{cluster}-{group['groupName']}-worker-{suffix()}", group["template"], labels, {}))
    return pods


def _deployment_pods(deployment: dict) -> list:
    template_hash = suffix(10)
    name = deployment["metadata"]["name"]
    count = int(deployment["spec"].get("replicas", 1))
    labels = {"pod-template-hash": template_hash}
    return [(f"{name}-{template_hash}-{suffix()}", deployment["spec"]["template"], labels, {}) for _ in range(count)]


def _statefulset_pods(statefulset: dict) -> list:
    name = statefulset["metadata"]["name"]
    pods = []
    for index in range(int(statefulset["spec"].get("replicas", 1))):
        labels = {
            "statefulset.kubernetes.io/pod-name": f"{name}-{index}",
            "apps.kubernetes.io/pod-index": str(index),
            "controller-revision-hash": f"{name}-{suffix(10)}",
        }
        pods.append((f"{name}-{index}", statefulset["spec"]["template"], labels, {}))
    return pods


def _kserve_pods(isvc: dict) -> list:
    meta, predictor = isvc["metadata"], isvc["spec"].get("predictor") or {}
    containers = copy.deepcopy(predictor.get("containers") or [])
    if not containers:
        model = predictor.get("model") or {}
        fmt = (model.get("modelFormat") or {}).get("name", "model")
        containers = [{"name": "kserve-container", "image": f"kserve/{fmt}server:latest"}]
    template = {
        "metadata": {"labels": dict(predictor.get("labels") or meta.get("labels") or {})},
        "spec": {"containers": containers},
    }
    labels = {"serving.kserve.io/inferenceservice": meta["name"], "component": "predictor"}
    count = max(int(predictor.get("minReplicas", 1) or 1), 1)
    return [(f"{meta['name']}-predictor-{suffix(10)}-{suffix()}", template, labels, {}) for _ in range(count)]
