"""Where a project's work (pipeline tasks, notebooks, model servers) may run: the runtime its settings choose
(`Project.runtime`, else PORTAL_RUNTIME) and, on Kubernetes, the clusters bound to it (the default binding first).
The dispatcher takes the first pool with room; `pipeline_manifests` shows what a pool would be given."""

from __future__ import annotations

from dataclasses import dataclass, replace

from django.conf import settings

from apps.runtime.base import Runtime, get_runtime
from apps.runtime.workload import Capacity, NodeRoom, place_replicas
from portal.lib.resources import Resources


@dataclass(frozen=True)
class Pool:
    """One place a task can go: the local runtime, or one cluster (and namespace) of the kubernetes runtime."""

    runtime: str
    cluster: str = ""
    namespace: str = ""

    @property
    def label(self) -> str:
        return f"cluster {self.cluster}" if self.cluster else "this machine"


def runtime_name_for(project) -> str:
    return project.runtime or settings.PORTAL_RUNTIME


def pools_for(project) -> list[Pool]:
    """The pools of `project` in the order they are tried. Empty when it runs on Kubernetes with no enabled
    cluster bound (its tasks then wait, saying so)."""
    name = runtime_name_for(project)
    if name != "kubernetes":
        return [Pool(name)]
    from apps.runtime.models import ProjectCluster

    bindings = ProjectCluster.objects.filter(project=project, cluster__enabled=True).select_related("cluster")
    return [Pool(name, b.cluster.name, b.effective_namespace) for b in bindings]


class Pools:
    """Pools and their free capacity for one dispatch pass: each looked up once, then debited as tasks are
    placed, so that one pass never hands out the same room twice."""

    def __init__(self) -> None:
        self._by_project: dict[int, list[Pool]] = {}
        self._free: dict[Pool, Resources | None] = {}
        self._capacity: dict[Pool, Capacity | None] = {}
        self._nodes: dict[Pool, list[NodeRoom]] = {}  # free per node, where the runtime reports its nodes

    def of(self, project) -> list[Pool]:
        if project.pk not in self._by_project:
            self._by_project[project.pk] = pools_for(project)
        return self._by_project[project.pk]

    @staticmethod
    def runtime(pool: Pool) -> Runtime:
        return get_runtime(pool.runtime)

    def ready(self, pool: Pool) -> bool:
        """Whether the pool can take work at all: for a task that needs nothing, the cheaper question (the
        local runtime answers it from its agents' heartbeats; a cluster from its last inventory)."""
        if pool.cluster or pool in self._capacity:
            return self._load(pool)
        return self.runtime(pool).ready()

    def free(self, pool: Pool) -> tuple[Resources | None, Capacity | None]:
        """What is still free in `pool` in this pass, and its capacity (None: unavailable)."""
        self._load(pool)
        return self._free[pool], self._capacity[pool]

    def _load(self, pool: Pool) -> bool:
        if pool not in self._capacity:
            runtime = self.runtime(pool)
            capacity = runtime.capacity(cluster=pool.cluster) if pool.cluster else runtime.capacity()
            self._capacity[pool] = capacity
            self._free[pool] = capacity.free if capacity else None
            self._nodes[pool] = list(capacity.nodes) if capacity else []
        return self._capacity[pool] is not None

    def placement(
        self, pool: Pool, replica: Resources, count: int, limit: dict[int, Resources] | None = None
    ) -> list[tuple[int, Resources]] | None:
        """Where `count` replicas of `replica` would go on the pool's nodes in this pass, all or none; a node of
        `limit` (by index) offers no more than that. [] when the runtime does not report its nodes (only the pool's
        total is known)."""
        self._load(pool)
        nodes = self._nodes.get(pool) or []
        return place_replicas(_limited(nodes, limit), replica, count) if nodes else []

    def nodes(self, pool: Pool) -> list[NodeRoom]:
        """The pool's nodes as this pass has left them (free room debited as tasks are placed); [] when unknown."""
        self._load(pool)
        return list(self._nodes.get(pool) or [])

    def take(
        self,
        pool: Pool,
        need: Resources,
        replica: Resources | None = None,
        count: int = 1,
        placed: list[tuple[int, Resources]] | None = None,
    ) -> None:
        """Debit `need` (`count` replicas of `replica`) from the pool, and from its nodes where they are known: those
        of `placed` (node index, what it takes there), else where `placement` puts them (neither: the total only)."""
        free = self._free.get(pool)
        if free is not None:
            self._free[pool] = free - need
        nodes = self._nodes.get(pool)
        if nodes and (placed is not None or replica is not None):
            for i, part in placed if placed is not None else place_replicas(nodes, replica, count) or ():
                nodes[i] = replace(nodes[i], free=nodes[i].free - part)


def _limited(nodes: list[NodeRoom], limit: dict[int, Resources] | None) -> list[NodeRoom]:
    """The nodes, those of `limit` offering no more than it (same indices)."""
    if not limit:
        return nodes
    return [replace(room, free=_least(room.free, limit[i])) if i in limit else room for i, room in enumerate(nodes)]


def _least(a: Resources, b: Resources) -> Resources:
    return Resources.of(min(a.cpu, b.cpu), min(a.memory, b.memory), min(a.gpu, b.gpu))
