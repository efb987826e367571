"""Sample workloads and cluster profiles for the Kubernetes runtime's tests: one per kind and framework.

The golden manifests (golden/<name>.yaml) are built from SAMPLES with `sample_profile()`; other tests import the
functions and override what they need, e.g. `sample_distributed("pytorch", uid="task-7")` or
`sample_profile(operators=frozenset())`. Every sample carries the portal's env contract and ids, as the
dispatcher gives them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from apps.runtime.kubernetes.profile import ClusterProfile
from apps.runtime.models import Operator
from apps.runtime.workload import Resources, Workload

WORK_DIR = "/var/lib/portal/work"
ALL_OPERATORS = frozenset(Operator.values)
# Every framework the "distributed" kind knows, with the replicas its sample asks for.
DISTRIBUTED = {
    "pytorch": {"worker": 2},  # as the built-in template asks: Master 1 + Worker 1 on the training operator
    "tf": {"chief": 1, "ps": 1, "worker": 2},
    "mpi": {"worker": 2},
    "horovod": {"worker": 2},
    "deepspeed": {"worker": 2},
    "paddle": {"worker": 2},
    "xgboost": {"master": 1, "worker": 2},
    "volcano": {"master": 1, "worker": 2},
    "ray": {"head": 1, "worker": 2},
}


def sample_profile(**overrides: Any) -> ClusterProfile:
    """A cluster with every operator, vGPU and RDMA resources, a resource group and the shared work folder."""
    values: dict[str, Any] = {
        "name": "gpu-cluster",
        "namespace": "team-a",
        "version": "1.33",
        "operators": ALL_OPERATORS,
        "node_selector": {"portal.io/resource-group": "training"},
        "gpu_resource": "nvidia.com/gpu",
        "gpu_type_label": "gpu-type",
        "vgpu_resources": {"memory": "nvidia.com/gpumem", "cores": "nvidia.com/gpucores"},
        "rdma_resource": "rdma/hca",
        "volcano_queue": "research",
        "ttl_seconds_after_finished": 3600,
        "work_claim": "portal-work",
        "work_dir": WORK_DIR,
    }
    values.update(overrides)
    return ClusterProfile(**values)


def _workload(default_uid: str, node: str, /, **overrides: Any) -> Workload:
    """`overrides` may replace the sample's uid and anything else."""
    uid = overrides.pop("uid", default_uid)
    task_run = uid.rpartition("-")[2]
    out = f"{WORK_DIR}/runs/7/{node}-1"
    values: dict[str, Any] = {
        "uid": uid,
        "name": f"demo-train-7-{node}-1",
        "project": "demo",
        "command": ["{python}", "-m", "apps.jobs.builtin_tasks.sklearn_train", "--max_depth", "3"],
        "image": "registry.example.com/portal/tasks:1.4",
        "env": {
            "PORTAL_PROJECT": "demo",
            "PORTAL_PIPELINE": "train",
            "PORTAL_RUN_ID": "7",
            "PORTAL_TASK": node,
            "PORTAL_TASK_ATTEMPT": "1",
            "PORTAL_OUTPUT_DIR": out,
            "PORTAL_API_URL": "https://portal.example.com/api/v1/",
            "MLFLOW_EXPERIMENT_NAME": "train",
        },
        "workdir": out,
        "resources": Resources(cpu=1, memory_bytes=2 * 2**30),
        "timeout": 1800,
        "labels": {"task_run": task_run, "run": "7", "project": "demo", "node": node, "attempt": "1"},
    }
    values.update(overrides)
    return Workload(**values)


def sample_job(**overrides: Any) -> Workload:
    return _workload("task-101", "train", **overrides)


def sample_gpu_job(**overrides: Any) -> Workload:
    """A job asking for everything a pod can carry: GPUs of a type, RDMA, every volume kind, tolerations,
    affinity, a node selector, a pull secret, retries."""
    values: dict[str, Any] = {
        "resources": Resources(cpu=8, memory_bytes=64 * 2**30, gpu=2, gpu_type="A100"),
        "rdma": True,
        "retries": 2,
        "node_selector": {"topology.kubernetes.io/zone": "zone-a"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 10, "preference": {"matchExpressions": [{"key": "fast-disk", "operator": "Exists"}]}}
                ]
            }
        },
        "image_pull_secrets": ["portal-registry-3"],
        "volumes": [
            {"kind": "pvc", "source": "datasets", "mount_path": "/data", "read_only": True},
            {"kind": "host_path", "source": "/mnt/scratch", "mount_path": "/scratch"},
            {"kind": "nfs", "source": "nfs.example.com:/exports/models", "mount_path": "/models"},
            {"kind": "config_map", "source": "train-config", "mount_path": "/etc/train"},
            {"kind": "secret", "source": "s3-credentials", "mount_path": "/etc/s3", "read_only": True},
            {"kind": "shm", "size": "16Gi"},
            {"kind": "empty_dir", "mount_path": "/tmp/cache", "size": "10Gi"},
        ],
    }
    values.update(overrides)
    return _workload("task-102", "train-gpu", **values)


def sample_vgpu_job(**overrides: Any) -> Workload:
    """A job on a share of a GPU: one vGPU with 8000 MiB of its memory and 30% of its cores."""
    resources = Resources(cpu=2, memory_bytes=8 * 2**30, gpu=1, vgpu={"memory": 8000, "cores": 30})
    return _workload("task-103", "finetune", **{"resources": resources, **overrides})


def sample_distributed(framework: str, **overrides: Any) -> Workload:
    values: dict[str, Any] = {
        "kind": "distributed",
        "framework": framework,
        "replicas": dict(DISTRIBUTED[framework]),
        "command": ["{python}", "-m", "apps.jobs.builtin_tasks.ddp_check", "--backend", "gloo"],
    }
    if framework == "deepspeed":
        values["resources"] = Resources(cpu=4, memory_bytes=16 * 2**30, gpu=2)
    values.update(overrides)
    return _workload(f"task-2{list(DISTRIBUTED).index(framework):02d}", f"train-{framework}", **values)


def sample_service(mode: str = "deployment", **overrides: Any) -> Workload:
    """A model server: a Deployment on port 8080 (autoscaled 2 to 5 on CPU), a KServe InferenceService on Knative
    (mode "kserve": Serverless, scaled 0 to 4 on concurrency) or one KServe runs as a Deployment with an HPA (mode
    "kserve-raw": RawDeployment, 1 to 4 on CPU)."""
    if mode == "kserve-raw":
        service = {
            "mode": "kserve",
            "deployment_mode": "RawDeployment",
            "min_replicas": 1,
            "max_replicas": 4,
            "scale_metric": "cpu",
            "scale_target": 75,
            "model_format": "sklearn",
            "storage_uri": "pvc://portal-work/models/iris/3",
        }
        values: dict[str, Any] = {"uid": "svc-303", "service": service, "image": "", "command": []}
    elif mode == "kserve":
        service = {
            "mode": "kserve",
            "deployment_mode": "Serverless",
            "min_replicas": 0,
            "max_replicas": 4,
            "scale_metric": "concurrency",
            "scale_target": 10,
            "model_format": "sklearn",
            "storage_uri": "s3://models/demo/iris/3",
            "canary_traffic_percent": 20,
        }
        values = {"uid": "svc-302", "service": service, "image": "", "command": []}
    else:
        service = {
            "mode": "deployment",
            "min_replicas": 2,
            "max_replicas": 5,
            "scale_metric": "cpu",
            "scale_target": 70,
        }
        values = {
            "uid": "svc-301",
            "service": service,
            "ports": {"http": 8080},
            "command": ["{python}", "-m", "apps.serving.model_server", "--port", "8080"],
            "timeout": None,
        }
    values = {"kind": "service", "workdir": "", **values, **overrides}
    return _workload(values.pop("uid"), "serve", **values)


def sample_notebook(**overrides: Any) -> Workload:
    values: dict[str, Any] = {
        "kind": "notebook",
        "image": "registry.example.com/portal/jupyter:4.2",
        "command": ["jupyter", "lab", "--ip=0.0.0.0", "--port=8888", "--no-browser"],
        "ports": {"http": 8888},
        "volumes": [{"kind": "pvc", "source": "home-alice", "mount_path": "/home/jovyan"}],
        "workdir": "/home/jovyan",
        "timeout": None,
        "labels": {"notebook": "12", "project": "demo"},
    }
    values.update(overrides)
    return _workload("nb-12", "notebook", **values)


# name → workload: one golden file each (golden/<name>.yaml).
SAMPLES: dict[str, Callable[[], Workload]] = {
    "job": sample_job,
    "job-gpu": sample_gpu_job,
    "job-vgpu": sample_vgpu_job,
    **{f"distributed-{framework}": (lambda f=framework: sample_distributed(f)) for framework in DISTRIBUTED},
    "service-deployment": sample_service,
    "service-kserve": lambda: sample_service("kserve"),
    "service-kserve-raw": lambda: sample_service("kserve-raw"),
    "notebook": sample_notebook,
}


def dicts_with(obj: object, key: str) -> list[dict]:
    """Every mapping in `obj` (manifests: nested dicts and lists) that has `key`, depth first: e.g. every pod spec
    ("containers"), or every place that places pods ("nodeSelector")."""
    found = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if key in node:
                found.append(node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(obj)
    return found
