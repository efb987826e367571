"""Who holds the runtimes' capacity now: every active workload (local or on a cluster) as the task, notebook or
service replica it runs, with its project, its user and what it asked for. Read by the capacity page and by a
project's overview.

Only the workload rows' small JSON keys are read (a spec also carries the command and env), then the objects
they run are fetched in one query per kind: a fixed number of queries whatever the number of workloads.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.utils.translation import gettext as _

from apps.projects.models import Project
from apps.projects.permissions import projects_for
from apps.runtime import hooks
from apps.runtime.models import Agent, Cluster, KubeWorkload, LocalWorkload, heartbeat_cutoff
from apps.runtime.workload import demand, total_replicas
from portal.lib.resources import Resources

ACTIVE_STATES = ("pending", "running")
SPEC_KEYS = ("spec__project", "spec__kind", "spec__resources", "spec__replicas", "spec__labels", "spec__framework")
TASK, NOTEBOOK, SERVICE, OTHER = "task", "notebook", "service", "other"


def _float(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return number if number > 0 else 0.0


def _resources(stored: dict[str, Any]) -> Resources:
    """The amounts of a stored {"cpu", "memory_bytes", "gpu"} (a workload's spec, an agent's capacity) that a page
    can show: what is missing, unreadable or negative counts as none (a page must not fail on one odd row)."""
    return Resources.of(_float(stored.get("cpu")), _float(stored.get("memory_bytes")), _float(stored.get("gpu")))


@dataclass
class Meter:
    """Something in use against its limit (None: no limit), for a bar (templates/projects/partials/meter.html)."""

    label: str
    used: float
    limit: float | None
    kind: str = "number"  # "bytes" formats with filesizeformat

    @property
    def percent(self) -> int:
        if not self.limit:
            return 0
        return min(100, round(100 * self.used / self.limit))

    @property
    def level(self) -> str:
        """Bootstrap colour of the bar: warn from 80 %, danger at the limit."""
        return "danger" if self.percent >= 100 else "warning" if self.percent >= 80 else "primary"


class ResourceAmounts:
    """`cpu`, `memory_bytes` and `gpu` of `self.resources`, as the capacity pages' templates read them."""

    resources: Resources

    @property
    def cpu(self) -> float:
        return self.resources.cpu

    @property
    def memory_bytes(self) -> float:
        return self.resources.memory

    @property
    def gpu(self) -> float:
        return self.resources.gpu


@dataclass
class Measured:
    """What workloads use now, from their latest samples (not what they asked for): CPU in cores, resident memory,
    GPU memory in bytes and the mean utilisation of the GPUs they are on (None: no GPU sampled)."""

    cpu: float = 0.0
    memory_bytes: float = 0.0
    gpu_memory_bytes: float | None = None
    gpu_percent: float | None = None
    replicas: int = 0
    gpu_replicas: int = 0  # of which sampled a GPU (the utilisation's weight)

    def add(self, other: Measured) -> None:
        """Sums; the GPU utilisation is the mean over the replicas that sampled one (a share, not a sum)."""
        if other.gpu_percent is not None:
            weight = other.gpu_replicas or max(other.replicas, 1)
            total = (self.gpu_percent or 0.0) * self.gpu_replicas + other.gpu_percent * weight
            self.gpu_replicas += weight
            self.gpu_percent = total / self.gpu_replicas
        if other.gpu_memory_bytes is not None:
            self.gpu_memory_bytes = (self.gpu_memory_bytes or 0) + other.gpu_memory_bytes
        self.cpu += other.cpu
        self.memory_bytes += other.memory_bytes
        self.replicas += other.replicas

    def to_json(self) -> dict[str, Any]:
        gpu = self.gpu_percent
        return {
            "cpu": round(self.cpu, 2),
            "memory_bytes": int(self.memory_bytes),
            "gpu_percent": None if gpu is None else round(gpu, 1),
            "gpu_memory_bytes": None if self.gpu_memory_bytes is None else int(self.gpu_memory_bytes),
            "replicas": self.replicas,
        }


def measure(holders: Iterable[Holder]) -> Measured:
    """Ask each label's measurer about the holders carrying it (one call per label present) and sum what they say."""
    holders = list(holders)
    for label, measurer in hooks.measurers().items():
        group = [h for h in holders if label in h.labels and h.measured is None]
        if group:
            measurer(group)
    total = Measured()
    for holder in holders:
        if holder.measured is not None:
            total.add(holder.measured)
    return total


@dataclass
class Holder(ResourceAmounts):
    """One active workload and what it holds (summed over its replicas)."""

    uid: str
    state: str
    project_slug: str
    kind: str
    resources: Resources
    labels: dict[str, str]
    started_at: datetime | None
    agent_id: int | None = None
    cluster_id: int | None = None
    # Filled in from the object the workload runs (see _describe).
    what: str = ""
    user: str = ""
    url: str = ""
    project_name: str = ""
    measured: Measured | None = None  # what it uses now (see `measure`)

    @property
    def kind_label(self) -> str:
        return {TASK: _("Task"), NOTEBOOK: _("Notebook"), SERVICE: _("Service")}.get(self.kind, _("Other"))

    @classmethod
    def from_row(cls, row: tuple[Any, ...], **place: Any) -> Holder:
        uid, state, started_at, project, kind, resources, replicas, labels, framework = row
        resources = resources if isinstance(resources, dict) else {}
        runtime = "local" if place.get("agent_id") is not None else ""
        count = total_replicas(kind, replicas, framework=framework or "", runtime=runtime)
        return cls(
            uid=uid,
            state=state,
            project_slug=str(project or ""),
            kind=kind or "",
            resources=demand(_resources(resources), count),
            labels=labels if isinstance(labels, dict) else {},
            started_at=started_at,
            **place,
        )


@dataclass
class Totals(ResourceAmounts):
    resources: Resources = field(default_factory=Resources.none)
    workloads: int = 0

    def add(self, holder: Holder) -> None:
        self.resources += holder.resources
        self.workloads += 1


def label_ids(holders: Iterable[Holder], key: str) -> set[int]:
    """The ids the holders carry under the label `key` (for an app's describer: one query for all of them)."""
    ids = set()
    for holder in holders:
        value = holder.labels.get(key)
        if value is not None and str(value).isdigit():
            ids.add(int(value))
    return ids


def _describe(holders: list[Holder]) -> None:
    """Set what each holder runs, for whom, and a link: the app whose label a workload carries describes it
    (`hooks.register_describer`, one query per app present); a workload no app describes shows its uid."""
    groups: dict[str, list[Holder]] = defaultdict(list)
    described = hooks.described_labels()
    for holder in holders:
        holder.kind, holder.what = OTHER, holder.uid
        label = next((key for key in described if key in holder.labels), None)
        if label is not None:
            groups[label].append(holder)
    for label, group in groups.items():
        hooks.describer(label)(group)


def _local_rows(**filters: Any) -> list[Holder]:
    rows = LocalWorkload.objects.filter(state__in=ACTIVE_STATES, **filters).order_by("created_at", "pk")
    return [
        Holder.from_row(row[1:], agent_id=row[0])
        for row in rows.values_list("agent_id", "uid", "state", "started_at", *SPEC_KEYS)
    ]


def _kube_rows(**filters: Any) -> list[Holder]:
    rows = KubeWorkload.objects.filter(state__in=ACTIVE_STATES, **filters).order_by("created_at", "pk")
    return [
        Holder.from_row(row[1:], cluster_id=row[0])
        for row in rows.values_list("cluster_id", "uid", "state", "started_at", *SPEC_KEYS)
    ]


def project_holders(project: Project) -> list[Holder]:
    """The project's active workloads, on this machine and on clusters, described."""
    holders = _local_rows(spec__project=project.slug) + _kube_rows(spec__project=project.slug)
    _describe(holders)
    return holders


# --- The capacity page ---------------------------------------------------------------------------------


@dataclass
class Machine:
    """A live local agent: its capacity, what is in use, and (visible) holders."""

    agent: Agent
    used: Totals = field(default_factory=Totals)
    others: Totals = field(default_factory=Totals)  # used by projects the viewer may not see
    holders: list[Holder] = field(default_factory=list)
    measured: Measured = field(default_factory=Measured)  # what every workload on it uses now, measured

    @property
    def capacity(self) -> Resources:
        """What the agent reported it has (its `capacity` JSON: cpu, memory_bytes, gpu and the GPUs' list)."""
        capacity = self.agent.capacity
        return _resources(capacity if isinstance(capacity, dict) else {})

    @property
    def gpus(self) -> list[dict[str, Any]]:
        gpus = self.agent.capacity.get("gpus")
        return [g for g in gpus if isinstance(g, dict)] if isinstance(gpus, list) else []

    @property
    def meters(self) -> list[Meter]:
        return [
            Meter(_("CPU cores"), self.used.cpu, self.capacity.cpu),
            Meter(_("Memory"), self.used.memory_bytes, self.capacity.memory, kind="bytes"),
            Meter(_("GPUs"), self.used.gpu, self.capacity.gpu),
        ]

    @property
    def live_meters(self) -> list[Meter]:
        """What the workloads use now (their latest samples) against what the machine has."""
        meters = [
            Meter(_("CPU cores in use"), round(self.measured.cpu, 2), self.capacity.cpu),
            Meter(_("Memory in use"), self.measured.memory_bytes, self.capacity.memory, kind="bytes"),
        ]
        gpu_memory = sum(_float(g.get("memory_bytes")) for g in self.gpus)
        if self.gpus:
            meters.append(
                Meter(_("GPU memory in use"), self.measured.gpu_memory_bytes or 0, gpu_memory or None, kind="bytes")
            )
            meters.append(Meter(_("GPU utilisation (mean, %)"), round(self.measured.gpu_percent or 0, 1), 100))
        return meters


@dataclass
class ClusterUse:
    """A cluster the viewer may see, with the portal's active workloads on it."""

    cluster: Cluster
    summary: Any  # apps.runtime.services.InventorySummary
    used: Totals = field(default_factory=Totals)
    others: Totals = field(default_factory=Totals)
    holders: list[Holder] = field(default_factory=list)

    @property
    def meters(self) -> list[Meter]:
        """What pods request (the portal's and anyone else's) against what the nodes can allocate."""
        total = self.summary.total
        return [
            Meter(_("CPU cores"), total.cpu.requested, total.cpu.allocatable),
            Meter(_("Memory"), total.memory.requested, total.memory.allocatable, kind="bytes"),
            Meter(_("GPUs"), total.gpu.requested, total.gpu.allocatable),
        ]


@dataclass
class Capacity:
    machines: list[Machine]
    unclaimed: list[Holder]  # local workloads no agent has taken yet
    unclaimed_others: Totals
    clusters: list[ClusterUse]
    show_all: bool


def _split(holders: list[Holder], visible: set[str] | None) -> tuple[list[Holder], Totals]:
    """(the holders the viewer may see, the totals of the others)."""
    shown, others = [], Totals()
    for holder in holders:
        if visible is None or holder.project_slug in visible:
            shown.append(holder)
        else:
            others.add(holder)
    return shown, others


def capacity(user: Any) -> Capacity:
    """Live local agents and the visible clusters with who holds what. Platform admins see every holder; anyone
    else sees the holders of their own projects and the rest only as a total ("other projects")."""
    from apps.runtime.services import is_platform_admin, summarize_inventory, visible_clusters

    show_all = is_platform_admin(user)
    visible = None if show_all else set(projects_for(user).values_list("slug", flat=True))
    agents = Agent.objects.filter(
        kind=Agent.Kind.LOCAL, heartbeat_at__gte=heartbeat_cutoff(), stopped_at__isnull=True
    ).order_by("hostname", "pk")
    machines = {agent.pk: Machine(agent) for agent in agents}
    unclaimed: list[Holder] = []
    shown: list[Holder] = []
    unclaimed_others = Totals()
    local = _local_rows()
    for holder in local:
        machine = machines.get(holder.agent_id) if holder.agent_id is not None else None
        if holder.agent_id is not None and machine is None:
            continue  # on a dead agent: the reconcile loop marks it lost
        mine, others = _split([holder], visible)
        if machine is not None:
            machine.used.add(holder)
            if others.workloads:
                machine.others.add(holder)
            machine.holders.extend(mine)
        elif mine:
            unclaimed.extend(mine)
        else:
            unclaimed_others.add(holder)
        shown.extend(mine)
    clusters = {
        c.pk: ClusterUse(c, summarize_inventory(c))
        for c in visible_clusters(user).filter(enabled=True).order_by("name")
    }
    for holder in _kube_rows(cluster_id__in=list(clusters)):
        use = clusters[holder.cluster_id]
        use.used.add(holder)
        mine, others = _split([holder], visible)
        if others.workloads:
            use.others.add(holder)
        use.holders.extend(mine)
        shown.extend(mine)
    _describe(shown)
    measure(local)  # every workload's use counts for its machine; only the visible ones are listed
    for holder in local:
        if holder.measured is not None and holder.agent_id in machines:
            machines[holder.agent_id].measured.add(holder.measured)
    return Capacity(
        machines=list(machines.values()),
        unclaimed=unclaimed,
        unclaimed_others=unclaimed_others,
        clusters=list(clusters.values()),
        show_all=show_all,
    )
