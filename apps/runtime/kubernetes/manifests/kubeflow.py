"""kind "distributed" on the Kubeflow training operator (kubeflow.org/v1): PyTorchJob, TFJob, MPIJob (MPI, Horovod,
DeepSpeed), PaddleJob, XGBoostJob. One module for the five because they differ only by a row of FLAVOURS.

`workload.replicas` maps roles to counts; what each framework makes of them:

- pytorch, xgboost: {"master": 1, "worker": N}. Without a master the first worker becomes it ({"worker": 2} is
  Master 1 + Worker 1), so that WORLD_SIZE is the count asked for and rank 0 exists: the operators inject
  MASTER_ADDR / RANK only when a Master replica exists (PyTorch) or insist on one (XGBoost).
- tf / tensorflow: {"chief": 0|1, "ps": N, "worker": N, "evaluator": N} ("master" is a synonym for chief); without
  a chief, worker 0 is the chief, as TensorFlow itself has it.
- paddle: {"master": 0|1, "worker": N}; collective training needs workers only.
- mpi, horovod, deepspeed: {"worker": N} plus an implicit {"launcher": 1}, which runs
  `mpirun -np N×slots … <command>`; the operator keeps the workers alive (`sleep`) for mpirun to start the ranks
  in them. slotsPerWorker = `procs_per_replica`, else the GPUs of a worker, at least 1. DeepSpeed and Horovod
  find their ranks from Open MPI's environment. The launcher gets the CPU and memory but no accelerators.

No replicas given = one worker. The ports and container names are those the operator looks for.

A workload with a strategy (apps/runtime/strategy.py) gets its variables in every replica; a PyTorchJob whose
replicas have several GPUs gets `nprocPerNode` and its command run by torchrun (which reads the PET_* variables the
operator sets); a DeepSpeed strategy's config is a ConfigMap (a companion object, `<name>-strategy`) mounted at
/etc/portal/strategy, named by PORTAL_DEEPSPEED_CONFIG.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from apps.runtime import strategy as strategies
from apps.runtime.kubernetes.manifests.job import describe, true_conditions
from apps.runtime.kubernetes.manifests.meta import NAME_MAX, ManifestError, metadata, object_name
from apps.runtime.kubernetes.manifests.pod import command_of, pod_template, priority_class_of
from apps.runtime.kubernetes.profile import ClusterProfile
from apps.runtime.models import Operator
from apps.runtime.workload import Phase, Workload

API_VERSION = "kubeflow.org/v1"


@dataclass(frozen=True)
class Flavour:
    """What tells one training-operator kind from another: its spec key, the container and port the operator
    looks for, the replica types it knows."""

    kind: str
    spec_key: str
    container: str
    port_name: str
    port: int
    roles: dict[str, str]  # workload role → replica type, in the order the replicas are listed
    singles: frozenset[str] = frozenset()  # replica types of at most one replica
    leader: str = ""  # the replica type the first worker becomes when none is asked for


_PYTORCH = Flavour(
    "PyTorchJob", "pytorchReplicaSpecs", "pytorch", "pytorchjob-port", 23456,
    {"master": "Master", "worker": "Worker"}, frozenset({"Master"}), leader="Master",
)  # fmt: skip
_TF = Flavour(
    "TFJob", "tfReplicaSpecs", "tensorflow", "tfjob-port", 2222,
    {"chief": "Chief", "master": "Chief", "ps": "PS", "worker": "Worker", "evaluator": "Evaluator"},
    frozenset({"Chief"}),
)  # fmt: skip
_MPI = Flavour(
    "MPIJob", "mpiReplicaSpecs", "mpi", "mpi-port", 9999,
    {"launcher": "Launcher", "worker": "Worker"}, frozenset({"Launcher"}),
)  # fmt: skip
_PADDLE = Flavour(
    "PaddleJob", "paddleReplicaSpecs", "paddle", "master", 36543,
    {"master": "Master", "worker": "Worker"}, frozenset({"Master"}),
)  # fmt: skip
_XGBOOST = Flavour(
    "XGBoostJob", "xgbReplicaSpecs", "xgboost", "xgboostjob-port", 9999,
    {"master": "Master", "worker": "Worker"}, frozenset({"Master"}), leader="Master",
)  # fmt: skip

FRAMEWORKS = {
    "pytorch": _PYTORCH,
    "tf": _TF,
    "tensorflow": _TF,
    "mpi": _MPI,
    "horovod": _MPI,
    "deepspeed": _MPI,
    "paddle": _PADDLE,
    "xgboost": _XGBOOST,
}
OPERATOR = Operator.TRAINING
KINDS = frozenset(flavour.kind for flavour in FRAMEWORKS.values())


def replica_counts(workload: Workload, flavour: Flavour) -> dict[str, int]:
    """Replica type → count, in the flavour's order (see the module docstring)."""
    asked = workload.replicas or {"worker": 1}
    counts: dict[str, int] = {}
    for role, count in asked.items():
        if role not in flavour.roles:
            known = ", ".join(dict.fromkeys(flavour.roles))
            raise ManifestError(f"replicas.{role}: {workload.framework} knows the roles {known}")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ManifestError(f"replicas.{role}: must be a whole number of 0 or more, not {count!r}")
        counts[flavour.roles[role]] = counts.get(flavour.roles[role], 0) + count
    for replica_type in flavour.singles:
        if counts.get(replica_type, 0) > 1:
            role = next(r for r, t in flavour.roles.items() if t == replica_type)
            raise ManifestError(f"replicas.{role}: {flavour.kind} has at most one {replica_type}")
    if flavour.leader and not counts.get(flavour.leader):
        if not counts.get("Worker"):
            raise ManifestError(f"replicas: {flavour.kind} needs at least one worker")
        counts[flavour.leader], counts["Worker"] = 1, counts["Worker"] - 1
    if flavour is _MPI:
        if not counts.get("Worker"):
            raise ManifestError("replicas.worker: an MPI job needs at least one worker")
        counts["Launcher"] = 1
    if flavour is _TF and not (counts.get("Chief") or counts.get("Worker")):
        raise ManifestError("replicas: a TFJob needs a chief or at least one worker")
    order = list(dict.fromkeys(flavour.roles.values()))
    return {t: counts[t] for t in order if counts.get(t)}


def run_policy(workload: Workload, profile: ClusterProfile, total: int) -> dict[str, Any]:
    policy: dict[str, Any] = {
        # Pods still running once the job is decided (parameter servers, an idle launcher) are removed; finished
        # pods stay until the TTL, so their logs can still be read.
        "cleanPodPolicy": "Running",
        "ttlSecondsAfterFinished": profile.ttl_seconds_after_finished,
    }
    if workload.timeout:
        policy["activeDeadlineSeconds"] = int(workload.timeout)
    policy["backoffLimit"] = workload.retries
    if gangs_on_volcano(profile):
        # Gang scheduling, when the operator runs with --gang-scheduler-name=volcano: all replicas or none, so
        # two half-scheduled jobs never wait on each other's GPUs.
        policy["schedulingPolicy"] = {"minAvailable": total, "queue": profile.volcano_queue}
        if name := priority_class_of(workload, profile):
            policy["schedulingPolicy"]["priorityClass"] = name  # the PodGroup's, as a Volcano Job's
    return policy


def gangs_on_volcano(profile: ClusterProfile) -> bool:
    """The training operator hands its jobs' gangs to Volcano (run with --gang-scheduler-name=volcano where Volcano
    is installed): Volcano then schedules the pods, and a pod naming another scheduler would leave the gang."""
    return Operator.VOLCANO in profile.operators


def slots_per_worker(workload: Workload) -> int:
    return workload.procs_per_replica or max(1, int(workload.resources.gpu))


def build(workload: Workload, profile: ClusterProfile) -> list[dict[str, Any]]:
    try:
        flavour = FRAMEWORKS[workload.framework]
    except KeyError:
        raise ManifestError(f"framework: {workload.framework!r} is not run by the training operator") from None
    companions: list[dict[str, Any]] = []
    torchrun_procs = 0
    if workload.strategy:
        workload, companions, torchrun_procs = _with_strategy(workload, profile, flavour)
    counts = replica_counts(workload, flavour)
    # With retries the operator restarts a failed replica in place (and counts it against backoffLimit);
    # without, the first failure fails the job.
    restart = "OnFailure" if workload.retries else "Never"
    command = command_of(workload)
    if torchrun_procs > 1:
        command = strategies.launch_command(command, torchrun_procs)
    specs: dict[str, Any] = {}
    by_volcano = gangs_on_volcano(profile)
    for replica_type, count in counts.items():
        role = replica_type.lower()
        if flavour is _MPI and replica_type == "Launcher":
            np = counts["Worker"] * slots_per_worker(workload)
            mpirun = ["mpirun", "--allow-run-as-root", "-np", str(np), "-bind-to", "none", "-map-by", "slot"]
            template = pod_template(
                workload, profile, role=role, container=flavour.container, restart_policy=restart,
                command=[*mpirun, *command], accelerators=False, by_volcano=by_volcano,
            )  # fmt: skip
        else:
            template = pod_template(
                workload, profile, role=role, container=flavour.container, restart_policy=restart,
                command=None if flavour is _MPI else command, ports={flavour.port_name: flavour.port},
                by_volcano=by_volcano,
            )  # fmt: skip
        specs[replica_type] = {"replicas": count, "restartPolicy": restart, "template": template}
    spec: dict[str, Any] = {}
    if flavour is _MPI:
        spec["slotsPerWorker"] = slots_per_worker(workload)
    elif flavour is _PYTORCH and workload.procs_per_replica:
        spec["nprocPerNode"] = str(workload.procs_per_replica)
    spec["runPolicy"] = run_policy(workload, profile, sum(counts.values()))
    spec[flavour.spec_key] = specs
    primary = {"apiVersion": API_VERSION, "kind": flavour.kind, "metadata": metadata(workload, profile), "spec": spec}
    return [primary, *companions]


def strategy_config_name(workload: Workload) -> str:
    return f"{object_name(workload)[: NAME_MAX - 9].rstrip('-')}-strategy"


def _with_strategy(
    workload: Workload, profile: ClusterProfile, flavour: Flavour
) -> tuple[Workload, list[dict[str, Any]], int]:
    """The workload with its strategy rendered: its variables, the DeepSpeed config's volume, the processes per
    replica (MPI: slotsPerWorker; PyTorch: nprocPerNode and torchrun); the companion ConfigMap; torchrun's
    processes per replica (0: no torchrun)."""
    try:
        strategy, layout = workload.strategy_layout()
    except ValueError as exc:
        raise ManifestError(str(exc)) from None
    env = {**workload.env, **strategies.env_of(strategy, layout, strategies.CLUSTER_CONFIG_DIR)}
    volumes = list(workload.volumes)
    companions = []
    if strategy["type"] == "deepspeed":
        name = strategy_config_name(workload)
        config = strategies.deepspeed_config(strategy, layout)
        companions.append({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata(workload, profile, name=name),
            "data": {strategies.DEEPSPEED_CONFIG_FILE: json.dumps(config, indent=2, sort_keys=True)},
        })  # fmt: skip
        volumes.append(
            {"kind": "config_map", "mount_path": strategies.CLUSTER_CONFIG_DIR, "source": name, "read_only": True}
        )
    procs = layout.procs_per_replica
    rendered = replace(workload, env=env, volumes=volumes, procs_per_replica=procs if procs > 1 else 0)
    return rendered, companions, procs if flavour is _PYTORCH else 0


def phase(obj: dict[str, Any]) -> tuple[Phase, str]:
    """From the operator's conditions: Created, Running, Restarting, Succeeded, Failed (the last two final)."""
    conditions = true_conditions(obj)
    if "Succeeded" in conditions:
        return Phase.SUCCEEDED, ""
    if "Failed" in conditions:
        return Phase.FAILED, describe(conditions["Failed"]) or "failed"
    if "Restarting" in conditions:
        return Phase.RUNNING, f"restarting: {describe(conditions['Restarting'])}".rstrip(": ")
    if "Running" in conditions:
        return Phase.RUNNING, ""
    return Phase.PENDING, ""
