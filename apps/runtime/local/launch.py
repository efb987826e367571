"""Turn a Workload into the processes the local agent starts: one per replica, with the same env contract
that the Kubeflow operators give pods (MASTER_ADDR/…/RANK for PyTorch, TF_CONFIG for TensorFlow)."""

from __future__ import annotations

import json
import os
import socket
import sys
from dataclasses import dataclass

from apps.runtime.workload import Workload


@dataclass
class ReplicaSpec:
    name: str  # "0" for a plain job, "worker-1", "master-0", …
    argv: list[str]
    env: dict[str, str]
    cwd: str


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def expand(argv: list[str]) -> list[str]:
    """`{python}` in a command means the interpreter of the task environment, called by full path."""
    return [sys.executable if token == "{python}" else token for token in argv]


def replica_names(workload: Workload) -> list[tuple[str, int]]:
    """[(role, index), …] in rank order. PyTorch's master (or TF's chief) comes first."""
    order = ["master", "chief", "launcher", "worker", "ps", "evaluator"]
    roles = sorted(workload.replicas.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else 99)
    return [(role, i) for role, count in roles for i in range(int(count))]


def base_env(workload: Workload) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key in {"PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "USER", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"}
    }
    env["PYTHONUNBUFFERED"] = "1"
    if workload.resources.gpu <= 0:
        env["NVIDIA_VISIBLE_DEVICES"] = "none"
        env["CUDA_VISIBLE_DEVICES"] = ""
    env.update({k: str(v) for k, v in workload.env.items()})
    return env


def plan(workload: Workload) -> list[ReplicaSpec]:
    argv = expand(workload.command)
    cwd = workload.workdir or os.getcwd()
    env = base_env(workload)
    if workload.kind != "distributed" or not workload.replicas:
        return [ReplicaSpec("0", argv, env, cwd)]
    replicas = replica_names(workload)
    world = len(replicas)
    if workload.framework in {"tf", "tensorflow"}:
        ports = [free_port() for _ in replicas]
        cluster: dict[str, list[str]] = {}
        for (role, _i), port in zip(replicas, ports, strict=True):
            cluster.setdefault(role, []).append(f"127.0.0.1:{port}")
        specs = []
        for role, index in replicas:
            tf_config = {"cluster": cluster, "task": {"type": role, "index": index}, "environment": "cloud"}
            specs.append(ReplicaSpec(f"{role}-{index}", argv, {**env, "TF_CONFIG": json.dumps(tf_config)}, cwd))
        return specs
    # PyTorch, XGBoost, DeepSpeed and anything else rendezvousing through a master: the operator's contract.
    master_port = str(free_port())
    specs = []
    for rank, (role, index) in enumerate(replicas):
        contract = {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": master_port,
            "WORLD_SIZE": str(world),
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(world),
            "GROUP_RANK": "0",
        }
        if workload.framework == "xgboost":
            contract.update({"WORKER_PORT": master_port, "WORKER_ADDRS": ",".join(["127.0.0.1"] * world)})
        specs.append(ReplicaSpec(f"{role}-{index}", argv, {**env, **contract}, cwd))
    return specs
