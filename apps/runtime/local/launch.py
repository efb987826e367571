"""Turn a Workload into the processes the local agent starts: one per replica, with the same env contract
that the Kubeflow operators give pods (MASTER_ADDR/…/RANK for PyTorch, TF_CONFIG for TensorFlow)."""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from django.conf import settings

from apps.runtime import strategy as strategies
from apps.runtime.workload import Workload

# "{python}" is the default task environment, "{python:train}" a named one (settings.PORTAL_TASK_ENVS).
_PYTHON_TOKEN = re.compile(r"^\{python(?::([^{}]*))?\}$")
# How to get a missing environment, where there is a recipe for it.
INSTALL_HINTS = {"train": "run `make train-env`", "llm": "run `make llm-env`"}


class TaskEnvironmentMissing(OSError):
    """A command asks for a task environment this machine lacks. An OSError, so that the agent reports it as the
    workload's failure to start ("could not start: task environment 'train' is not installed: …")."""

    def __init__(self, env: str, message: str) -> None:
        super().__init__(message)  # one argument: str() is the message alone, with no errno
        self.env = env


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


def expand(argv: list[str], envs: Mapping[str, str] | None = None) -> list[str]:
    """`{python}` in a command means the interpreter of the default task environment and `{python:<name>}` that
    of a named one, called by full path. TaskEnvironmentMissing when it is unknown or not installed here."""
    envs = settings.PORTAL_TASK_ENVS if envs is None else envs
    expanded = []
    for token in argv:
        match = _PYTHON_TOKEN.match(token)
        if match is None:
            expanded.append(token)
        else:
            expanded.append(interpreter("default" if match.group(1) is None else match.group(1), envs))
    return expanded


def interpreter(name: str, envs: Mapping[str, str]) -> str:
    """The full path of task environment `name`'s Python, which must exist on this machine."""
    if name not in envs:
        known = ", ".join(sorted(envs))
        raise TaskEnvironmentMissing(name, f"unknown task environment {name!r} (this machine has: {known})")
    path = envs[name]
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        hint = INSTALL_HINTS.get(name, f"set PORTAL_TASK_ENV_{name.upper()} to its interpreter")
        raise TaskEnvironmentMissing(name, f"task environment {name!r} is not installed (no {path}): {hint}")
    return path


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
    # Spark runs one process locally: local[N] in its JVM is the driver and the executors.
    if workload.kind != "distributed" or not workload.replicas or workload.framework == "spark":
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
    procs = 1
    if workload.strategy:
        strategy, layout = workload.strategy_layout()
        env.update(strategy_env(strategy, layout, cwd))
        if strategy["type"] == "horovod":
            return [horovod_launcher(argv, layout.world, env, cwd)]
        procs = layout.procs_per_replica
        argv = strategies.launch_command(argv, procs)
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
        if workload.strategy:
            # torchrun's own variables, as the training operator sets them in a PyTorchJob's pods: with several
            # processes per replica, torchrun (launch_command) reads them and gives each process its RANK.
            contract.update({
                "PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": master_port, "PET_NNODES": str(world),
                "PET_NODE_RANK": str(rank), "PET_NPROC_PER_NODE": str(procs),
            })  # fmt: skip
        specs.append(ReplicaSpec(f"{role}-{index}", argv, {**env, **contract}, cwd))
    return specs


def strategy_env(strategy: dict, layout: strategies.Layout, cwd: str) -> dict[str, str]:
    """The strategy's variables; DeepSpeed's config is written as a file under the workdir (a pod mounts it from a
    ConfigMap instead)."""
    folder = os.path.join(cwd, strategies.LOCAL_CONFIG_DIR)
    if strategy["type"] == "deepspeed":
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, strategies.DEEPSPEED_CONFIG_FILE), "w", encoding="utf-8") as file:
            json.dump(strategies.deepspeed_config(strategy, layout), file, indent=2, sort_keys=True)
    return strategies.env_of(strategy, layout, folder)


def horovod_launcher(argv: list[str], world: int, env: dict[str, str], cwd: str) -> ReplicaSpec:
    """Horovod locally: one `horovodrun` (from the interpreter's environment) that starts every rank on this host,
    as the MPIJob's launcher does on a cluster. Without Horovod installed the task fails to start, saying so."""
    folder = os.path.dirname(argv[0]) if os.path.isabs(argv[0]) else ""
    horovodrun = os.path.join(folder, "horovodrun") if folder else "horovodrun"
    return ReplicaSpec("launcher-0", [horovodrun, "-np", str(world), "-H", f"127.0.0.1:{world}", *argv], env, cwd)
