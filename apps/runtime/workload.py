"""The neutral description of work that every runtime understands, and what a runtime reports back."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

# Resources and their parsers live in portal/lib/resources.py; these names stay importable from here.
from apps.runtime.strategy import Layout
from apps.runtime.strategy import check as check_strategy
from portal.lib.resources import MAX_AMOUNT as MAX_AMOUNT
from portal.lib.resources import MAX_MEMORY as MAX_MEMORY
from portal.lib.resources import Resources, parse_memory
from portal.lib.resources import format_memory as format_memory

# The reason of a workload its agent cancelled because the agent itself was stopping (SIGTERM), not because anyone
# asked: the work is lost with its agent, and a service or a notebook that wanted it running starts it again.
AGENT_SHUT_DOWN = "the agent shut down"


class Phase(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    LOST = "lost"

    @property
    def finished(self) -> bool:
        return self not in (Phase.PENDING, Phase.RUNNING)


VOLUME_KINDS = ("pvc", "host_path", "nfs", "config_map", "secret", "shm", "empty_dir")
SERVICE_MODES = ("deployment", "kserve")
SCALE_METRICS = ("cpu", "memory", "concurrency", "rps")
# How KServe runs an InferenceService: RawDeployment (a Deployment and an HPA, no Knative) or Serverless (Knative:
# scale to zero, scaling on concurrency or requests per second).
KSERVE_DEPLOYMENT_MODES = ("RawDeployment", "Serverless")
_HPA_METRICS = ("cpu", "memory")
_SERVICE_KEYS = (
    "mode", "deployment_mode", "min_replicas", "max_replicas", "scale_metric", "scale_target",
    "model_format", "storage_uri", "canary_traffic_percent",
)  # fmt: skip
# Names of Kubernetes objects a volume may refer to (a PVC, ConfigMap or Secret): DNS-1123 subdomains.
_OBJECT_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NFS_RE = re.compile(r"^(?P<server>[^:/\s]+):(?P<path>/\S*)$")
# A container port's name (IANA_SVC_NAME): up to 15 lower-case letters, digits and inner single hyphens.
_PORT_NAME_RE = re.compile(r"^(?=.*[a-z])[a-z0-9]([a-z0-9]|-(?!-))*(?<!-)$")


def total_replicas(kind: str, replicas: Any, *, framework: str = "", runtime: str = "") -> int:
    """How many replicas a workload of `kind` runs, each holding its per-replica resources: the sum over every
    role (master + workers, chief + workers, ps + workers, ...) of a distributed one, 1 for anything else. An MPI
    launcher is left out: on a cluster it gets no accelerators, and locally `horovodrun` stands for the workers.
    On the local runtime (`runtime="local"`) a Spark job is one process whatever its replicas (docs/spark.md)."""
    if kind != "distributed" or not isinstance(replicas, dict):
        return 1
    if framework == "spark" and runtime == "local":
        return 1
    counts = 0
    for role, n in replicas.items():
        if role == "launcher" or isinstance(n, bool):
            continue
        try:
            counts += max(int(float(n)), 0)
        except (TypeError, ValueError):
            continue
    return max(counts, 1)


def demand(resources: Resources, replicas: int = 1) -> Resources:
    """What a whole job holds: its per-replica `resources` × its replicas (`total_replicas`). The one function the
    quota check at save, the queue, the capacity of the local runtime and the usage pages count a job's demand with
    (a 2-replica × 4-GPU job holds 8 GPUs, as the runtimes launch it)."""
    return resources * replicas if replicas > 1 else resources


def _integer(value: Any, name: str, minimum: int = 0, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"{name}: not a whole number: {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"{name}: not a whole number: {value!r}") from None
    if number < minimum or (maximum is not None and number > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f"{minimum} or more"
        raise ValueError(f"{name}: must be {bound}, not {number}")
    return number


def parse_volume(raw: Any, name: str) -> dict[str, Any]:
    """One volume as {"kind", "mount_path", "source", "read_only", "size"} (size in bytes or None).

    kind: pvc (source = claim), host_path (source = absolute path on the node), nfs (source = "server:/export"),
    config_map / secret (source = its name), shm (a memory-backed emptyDir at /dev/shm; size = its limit),
    empty_dir (scratch space; size = its limit)."""
    if not isinstance(raw, dict):
        raise ValueError(f"{name}: must be a mapping, not {raw!r}")
    unknown = set(raw) - {"kind", "mount_path", "source", "read_only", "size"}
    if unknown:
        raise ValueError(f"{name}.{sorted(unknown)[0]}: unknown (use kind, mount_path, source, read_only, size)")
    kind = raw.get("kind")
    if kind not in VOLUME_KINDS:
        raise ValueError(f"{name}.kind: must be one of {', '.join(VOLUME_KINDS)}, not {kind!r}")
    mount_path = raw.get("mount_path") or ("/dev/shm" if kind == "shm" else "")
    if not isinstance(mount_path, str) or not mount_path.startswith("/") or ":" in mount_path:
        raise ValueError(f"{name}.mount_path: must be an absolute path without ':', not {mount_path!r}")
    if kind == "shm" and mount_path != "/dev/shm":
        raise ValueError(f"{name}.mount_path: a shm volume is mounted at /dev/shm, not {mount_path!r}")
    source = raw.get("source") or ""
    if not isinstance(source, str):
        raise ValueError(f"{name}.source: not a string: {source!r}")
    if kind in ("shm", "empty_dir"):
        if source:
            raise ValueError(f"{name}.source: a {kind} volume has no source")
    elif kind == "host_path":
        if not source.startswith("/"):
            raise ValueError(f"{name}.source: must be an absolute path on the node, not {source!r}")
    elif kind == "nfs":
        if not _NFS_RE.match(source):
            raise ValueError(f"{name}.source: must be server:/exported/path, not {source!r}")
    elif not (_OBJECT_NAME_RE.match(source) and len(source) <= 253):
        raise ValueError(f"{name}.source: must name a {kind.replace('_', ' ')} (lower-case DNS name), not {source!r}")
    read_only = raw.get("read_only", False)
    if not isinstance(read_only, bool):
        raise ValueError(f"{name}.read_only: must be true or false, not {read_only!r}")
    try:
        size = parse_memory(raw.get("size"))
    except ValueError as exc:
        raise ValueError(f"{name}.size: {exc}") from None
    if size is not None and kind not in ("shm", "empty_dir"):
        raise ValueError(f"{name}.size: only shm and empty_dir volumes have a size")
    return {"kind": kind, "mount_path": mount_path, "source": source, "read_only": read_only, "size": size}


def parse_volumes(raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, list | tuple):
        raise ValueError(f"volumes: must be a list, not {raw!r}")
    volumes = [parse_volume(item, f"volumes[{i}]") for i, item in enumerate(raw)]
    seen: dict[str, int] = {}
    for i, volume in enumerate(volumes):
        if volume["mount_path"] in seen:
            first = seen[volume["mount_path"]]
            raise ValueError(f"volumes[{i}].mount_path: {volume['mount_path']} is already used by volumes[{first}]")
        seen[volume["mount_path"]] = i
    return volumes


def parse_ports(raw: Any) -> dict[str, int]:
    """{"http": 8080}: the ports a service or notebook listens on, by name (names as Kubernetes wants them)."""
    if not isinstance(raw, dict):
        raise ValueError(f"ports: must be a mapping of name to port, not {raw!r}")
    ports = {}
    for name, port in raw.items():
        if not isinstance(name, str) or len(name) > 15 or not _PORT_NAME_RE.match(name):
            raise ValueError(f"ports.{name}: a port name is 1-15 lower-case letters, digits and single hyphens")
        ports[name] = _integer(port, f"ports.{name}", 1, 65535)
    return ports


def parse_service(raw: Any) -> dict[str, Any]:
    """How a workload of kind "service" is served, with every default filled in:

    mode: "deployment" (Deployment + Service + HorizontalPodAutoscaler) or "kserve" (an InferenceService);
    min_replicas / max_replicas (autoscaling when max > min; 0 = scale to zero, KServe only);
    scale_metric cpu | memory | concurrency | rps and scale_target (utilisation % for cpu/memory);
    model_format / storage_uri (KServe picks the serving runtime by format); canary_traffic_percent (KServe);
    deployment_mode (KServe): RawDeployment (the default; an HPA: cpu or memory, at least one replica) or
    Serverless (Knative: any metric, scale to zero)."""
    if not isinstance(raw, dict):
        raise ValueError(f"service: must be a mapping, not {raw!r}")
    unknown = set(raw) - set(_SERVICE_KEYS)
    if unknown:
        raise ValueError(f"service.{sorted(unknown)[0]}: unknown (use {', '.join(_SERVICE_KEYS)})")
    mode = raw.get("mode") or "deployment"
    if mode not in SERVICE_MODES:
        raise ValueError(f"service.mode: must be one of {', '.join(SERVICE_MODES)}, not {mode!r}")
    min_replicas = _integer(raw.get("min_replicas", 1), "service.min_replicas")
    max_replicas = _integer(raw.get("max_replicas") or max(min_replicas, 1), "service.max_replicas", 1)
    if max_replicas < min_replicas:
        raise ValueError(f"service.max_replicas: {max_replicas} is less than min_replicas ({min_replicas})")
    metric = raw.get("scale_metric") or "cpu"
    if metric not in SCALE_METRICS:
        raise ValueError(f"service.scale_metric: must be one of {', '.join(SCALE_METRICS)}, not {metric!r}")
    target = raw.get("scale_target")
    target = None if target in (None, "") else _integer(target, "service.scale_target", 1)
    canary = raw.get("canary_traffic_percent")
    canary = None if canary in (None, "") else _integer(canary, "service.canary_traffic_percent", 0, 100)
    deployment_mode = raw.get("deployment_mode") or "RawDeployment"
    if deployment_mode not in KSERVE_DEPLOYMENT_MODES:
        raise ValueError(
            f"service.deployment_mode: must be one of {', '.join(KSERVE_DEPLOYMENT_MODES)}, not {deployment_mode!r}"
        )
    if mode == "kserve" and deployment_mode == "RawDeployment":
        if min_replicas < 1:
            raise ValueError("service.min_replicas: scaling to zero needs deployment_mode Serverless")
        if metric not in _HPA_METRICS:
            raise ValueError(
                f"service.scale_metric: RawDeployment scales on {' or '.join(_HPA_METRICS)} (an HPA), not {metric!r}"
            )
    texts = {}
    for key in ("model_format", "storage_uri"):
        value = raw.get(key) or ""
        if not isinstance(value, str):
            raise ValueError(f"service.{key}: not a string: {value!r}")
        texts[key] = value
    return {
        "mode": mode,
        "deployment_mode": deployment_mode,
        "min_replicas": min_replicas,
        "max_replicas": max_replicas,
        "scale_metric": metric,
        "scale_target": target,
        **texts,
        "canary_traffic_percent": canary,
    }


def _string_map(raw: Any, name: str) -> dict[str, str]:
    if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        raise ValueError(f"{name}: must be a mapping of strings, not {raw!r}")
    return dict(raw)


@dataclass
class Workload:
    """What to run. `uid` makes submission idempotent; the same workload becomes a process tree locally or
    a Job / PyTorchJob / … on Kubernetes.

    `replicas` maps a role to a count; which roles a framework knows is documented where it is built (the local
    runtime: apps/runtime/local/launch.py; Kubernetes: apps/runtime/kubernetes/manifests/). The fields after
    `labels` matter on a cluster only (the local runtime ignores them); they are checked when the workload is
    made, so a bad one fails with a ValueError naming the field."""

    uid: str
    name: str
    project: str
    command: list[str]
    kind: str = "job"
    framework: str = ""
    image: str = ""
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = ""
    replicas: dict[str, int] = field(default_factory=dict)
    resources: Resources = field(default_factory=Resources)
    timeout: int | None = None
    labels: dict[str, str] = field(default_factory=dict)
    # Restarts the runtime itself makes before the workload fails (backoffLimit, maxRetry); pipeline retries are
    # new attempts instead.
    retries: int = 0
    cluster: str = ""  # kubernetes: a Cluster's name; empty = the runtime chooses
    namespace: str = ""  # kubernetes: empty = the project's namespace on that cluster
    image_pull_secrets: list[str] = field(default_factory=list)  # names of dockerconfigjson Secrets
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)  # Kubernetes Toleration objects
    affinity: dict[str, Any] = field(default_factory=dict)  # a Kubernetes Affinity object
    volumes: list[dict[str, Any]] = field(default_factory=list)  # see parse_volume
    ports: dict[str, int] = field(default_factory=dict)  # services and notebooks: name → port
    service: dict[str, Any] = field(default_factory=dict)  # kind "service": see parse_service
    rdma: bool = False  # an RDMA device and the IPC_LOCK capability in every replica
    # Processes per replica for frameworks that start several (PyTorch's nprocPerNode, MPI's slotsPerWorker);
    # 0 = the framework's default (for MPI: one per GPU of a worker, at least one).
    procs_per_replica: int = 0
    # kind "distributed": how the processes share model and data (apps/runtime/strategy.py); empty = none.
    strategy: dict[str, Any] = field(default_factory=dict)
    # A pipeline task's run priority (the queue's order; apps/runtime/priority.py): its pods name that level's
    # PriorityClass on a cluster that has them. None: no class (notebooks, services).
    priority: int | None = None
    # Nodes (by name) that none of its replicas may be placed on: the queue keeps them for a task that holds a
    # reservation there (apps/jobs/queue_policy.py). On Kubernetes a required node affinity on the nodes' names.
    avoid_nodes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.node_selector = _string_map(self.node_selector, "node_selector")
        avoid = self.avoid_nodes
        if not isinstance(avoid, list | tuple) or not all(isinstance(n, str) and n for n in avoid):
            raise ValueError(f"avoid_nodes: must be a list of node names, not {self.avoid_nodes!r}")
        self.avoid_nodes = sorted(set(self.avoid_nodes))
        if not isinstance(self.tolerations, list | tuple) or not all(isinstance(t, dict) for t in self.tolerations):
            raise ValueError(f"tolerations: must be a list of toleration mappings, not {self.tolerations!r}")
        self.tolerations = [dict(t) for t in self.tolerations]
        if not isinstance(self.affinity, dict):
            raise ValueError(f"affinity: must be a mapping, not {self.affinity!r}")
        self.volumes = parse_volumes(self.volumes)
        self.retries = _integer(self.retries, "retries")
        self.procs_per_replica = _integer(self.procs_per_replica, "procs_per_replica")
        if not isinstance(self.image_pull_secrets, list | tuple) or not all(
            isinstance(s, str) and _OBJECT_NAME_RE.match(s) for s in self.image_pull_secrets
        ):
            raise ValueError(f"image_pull_secrets: must be a list of Secret names, not {self.image_pull_secrets!r}")
        self.image_pull_secrets = list(self.image_pull_secrets)
        self.ports = parse_ports(self.ports)
        # Kept as given when empty, so that workloads of other kinds do not carry a service's defaults around.
        self.service = parse_service(self.service) if self.service else {}
        if not isinstance(self.rdma, bool):
            raise ValueError(f"rdma: must be true or false, not {self.rdma!r}")
        if self.strategy:
            self.strategy = self.strategy_layout()[0]

    def strategy_layout(self) -> tuple[dict[str, Any], Layout]:
        """The strategy, normalized, and its layout over this workload's replicas and GPUs. StrategyError (a
        ValueError naming `strategy.<field>`) when it cannot run so; LookupError when there is no strategy."""
        if not self.strategy:
            raise LookupError("the workload has no strategy")
        return check_strategy(
            self.strategy, kind=self.kind, framework=self.framework, replicas=self.replicas,
            gpus=self.resources.gpu, gpu_type=self.resources.gpu_type, command=self.command,
        )  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["resources"] = self.resources.to_json()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Workload:
        """From `as_dict()`, including dicts stored before the cluster fields existed (they take their defaults)."""
        data = dict(data)
        data["resources"] = Resources.from_json(data.get("resources"))
        return cls(**data)


@dataclass
class Status:
    phase: Phase
    exit_code: int | None = None
    reason: str = ""
    replicas: dict[str, str] = field(default_factory=dict)
    usage: dict[str, float] = field(default_factory=dict)  # cpu_seconds, peak_rss_bytes, wall_seconds
    # The image that really ran, as the runtime resolved it (Kubernetes: the container's imageID); "" where the
    # runtime runs no image (local) or has not pulled it yet.
    image_digest: str = ""


def task_run_id(value: object) -> int | None:
    """A task run's id from where a runtime keeps it as text (a workload's "task_run" label, a pod's task-run label,
    an inventory's holder key); None for anything that is not a plain decimal id."""
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    return None


@dataclass(frozen=True)
class NodeRoom:
    """One node of a runtime: what is free on it now, and what it has; its name (what `Workload.avoid_nodes` names)
    and, where the runtime knows them, the portal's tasks on it: (task run id, what that task holds on this node).
    The queue's reservations read when each of those ends (docs/scheduling.md, "Node-level reservations")."""

    free: Resources
    total: Resources
    name: str = ""
    holders: tuple[tuple[int, Resources], ...] = ()


@dataclass(frozen=True)
class Capacity:
    """What the runtime can still take: free now, and the total it has; per node where the runtime knows its nodes
    (a cluster's inventory, the simulated cluster), so that the queue admits a task only where all its replicas fit."""

    cpu: float
    memory_bytes: int
    gpu: float
    total_cpu: float
    total_memory_bytes: int
    total_gpu: float
    nodes: tuple[NodeRoom, ...] = field(default=(), compare=False)

    @classmethod
    def of(cls, *, free: Resources, total: Resources, nodes: tuple[NodeRoom, ...] = ()) -> Capacity:
        return cls(
            cpu=free.cpu,
            memory_bytes=int(free.memory),
            gpu=free.gpu,
            total_cpu=total.cpu,
            total_memory_bytes=int(total.memory),
            total_gpu=total.gpu,
            nodes=tuple(nodes),
        )

    @property
    def free(self) -> Resources:
        return Resources.of(self.cpu, self.memory_bytes, self.gpu)

    @property
    def total(self) -> Resources:
        return Resources.of(self.total_cpu, self.total_memory_bytes, self.total_gpu)


def place_replicas(nodes: list[NodeRoom], replica: Resources, count: int) -> list[tuple[int, Resources]] | None:
    """Where `count` replicas of `replica` go on `nodes`, all or none (a gang): each on the first node with room for
    it, and one larger than any node (more GPUs than a node has) on as many whole idle nodes as its GPUs fill, its
    CPU and memory split over them — as the simulated cluster places it. A list of (node index, what it takes there);
    None when they do not all fit. `nodes` is not changed."""
    free = [n.free for n in nodes]
    idle = [not n.total.exceeded_by(n.free) and not n.free.exceeded_by(n.total) for n in nodes]
    largest = max((n.total.gpu for n in nodes), default=0)
    placed: list[tuple[int, Resources]] = []
    for _ in range(count):
        if replica.gpu > largest > 0:
            spread = -(-int(replica.gpu) // int(largest))
            whole = [i for i, is_idle in enumerate(idle) if is_idle][:spread]
            if len(whole) < spread:
                return None
            part = Resources.of(replica.cpu / spread, replica.memory // spread, largest)
            for i in whole:
                placed.append((i, part))
                free[i], idle[i] = free[i] - part, False
            continue
        for i, room in enumerate(free):
            if not room.exceeded_by(replica):
                placed.append((i, replica))
                free[i], idle[i] = room - replica, False
                break
        else:
            return None
    return placed
