"""A cluster of N nodes × G GPUs (plus CPU cores and memory) on a virtual clock, and the runtime that hands it
workloads (`SimulatedRuntime`, the third implementation of apps/runtime/base.py's interface).

A workload submitted to the runtime starts at once when some placement fits it: a job of at most G GPUs on one node
(which one: the cluster's placement strategy, below), a larger one on GPUs/G whole idle nodes, all or nothing. One
that fits nowhere stays pending in the runtime, as a pod the Kubernetes scheduler cannot bind does, and starts (in
submission order, any that fits) when a completion frees room. It runs for the duration its trace job gives and then
succeeds. A workload is never placed on the nodes its `avoid_nodes` names (the queue keeps them for a reservation),
and `capacity()` names each node ("node-0", …) and the tasks holding room on it, as a cluster's inventory does.

Placement strategies, for workloads that fit on one node (`SimCluster(..., placement=...)`):

- "first-fit" (FIRST_FIT, the default): the first node, by index, with room for it;
- "pack" (PACK, best fit): the node with room that has the fewest free GPUs (left after placing it), ties by index,
  so that partly used nodes fill up and whole nodes stay idle;
- "spread" (SPREAD, worst fit): the node with room that has the most free GPUs, ties by index — what Kubernetes'
  default scheduler does (NodeResourcesFit, LeastAllocated).

A multi-node gang takes the first whole idle nodes by index under every strategy.
"""

from __future__ import annotations

import bisect
import contextlib
import heapq
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from apps.runtime import base
from apps.runtime.base import Runtime
from apps.runtime.workload import Capacity, NodeRoom, Phase, Status, Workload, demand, task_run_id, total_replicas
from portal.lib.resources import Resources

NAME = "simulated"
FIRST_FIT, PACK, SPREAD = "first-fit", "pack", "spread"
PLACEMENTS = (FIRST_FIT, PACK, SPREAD)


@dataclass
class Node:
    gpus: int
    cpus: float
    memory: int
    free_gpus: int = 0
    free_cpus: float = 0.0
    free_memory: int = 0
    name: str = ""
    # The workloads on it that a portal task submitted: uid → (task run id, what it holds here), for capacity().
    holders: dict[str, tuple[int, Resources]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.free_gpus, self.free_cpus, self.free_memory = self.gpus, self.cpus, self.memory

    def fits(self, gpus: int, cpus: float, memory: int) -> bool:
        return gpus <= self.free_gpus and cpus <= self.free_cpus + 1e-9 and memory <= self.free_memory

    @property
    def idle(self) -> bool:
        return self.free_gpus == self.gpus and self.free_cpus >= self.cpus - 1e-9 and self.free_memory == self.memory


@dataclass
class SimWorkload:
    """A workload the cluster holds: what it asks for, where it runs and when."""

    uid: str
    gpus: int
    cpus: float
    memory: int
    duration: float
    key: str = ""  # the caller's name for it (a trace job's id)
    task: int | None = None  # the portal's task run id (its workload's "task_run" label), when a task submitted it
    avoid: frozenset[int] = frozenset()  # nodes (indices) it must not be placed on (Workload.avoid_nodes)
    phase: Phase = Phase.PENDING
    submitted_at: float = 0.0
    started_at: float | None = None
    ended_at: float | None = None
    placement: list[tuple[int, int, float, int]] = field(default_factory=list)  # (node, gpus, cpus, memory)


class SimCluster:
    """Nodes, a virtual clock (`now`, seconds) and the workloads on them. `duration_of(workload)` tells how long a
    workload submitted through the runtime runs (the replay looks it up in its trace). `placement` chooses the node
    of a workload that fits on one (FIRST_FIT, PACK, SPREAD: the module's docstring); a multi-node gang always takes
    whole idle nodes."""

    def __init__(
        self,
        nodes: int,
        gpus_per_node: int = 8,
        cpus_per_node: float = 64,
        memory_per_node: int = 1 << 40,
        placement: str = FIRST_FIT,
    ):
        if nodes < 1 or gpus_per_node < 1:
            raise ValueError("a cluster has at least one node with at least one GPU")
        if placement not in PLACEMENTS:
            raise ValueError(f"unknown placement {placement!r}; known: {', '.join(PLACEMENTS)}")
        self.placement = placement
        self.gpus_per_node = gpus_per_node
        self.nodes = [Node(gpus_per_node, cpus_per_node, memory_per_node, name=f"node-{i}") for i in range(nodes)]
        self.node_index = {node.name: i for i, node in enumerate(self.nodes)}
        self.now = 0.0
        self.workloads: dict[str, SimWorkload] = {}
        self.pending: list[str] = []  # submitted, placed nowhere yet, in submission order
        self._ends: list[tuple[float, int, str]] = []
        self._seq = 0
        self.duration_of: Callable[[Workload], tuple[str, float]] | None = None
        # Busy GPUs over time, integrated: ∫ busy dt from 0 to `_last`.
        self.busy_gpus = 0
        self.peak_busy_gpus = 0
        self._busy_integral = 0.0
        self._last = 0.0
        self._history: list[tuple[float, float, int]] = []  # (time, ∫ busy until then, busy from then on)
        self.on_change: Callable[[SimCluster], None] | None = None  # called after every start and end (tests)
        # Workloads cancelled since the caller last looked (their ends to report, as a controller would), and the
        # GPU-seconds that cancelled running workloads had run: work lost to preemption.
        self.cancelled: list[str] = []
        self.lost_gpu_seconds = 0.0

    # --- size ---------------------------------------------------------------------------------

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_node * len(self.nodes)

    @property
    def total(self) -> Resources:
        return Resources.of(sum(n.cpus for n in self.nodes), sum(n.memory for n in self.nodes), self.total_gpus)

    def held(self) -> Resources:
        """What running and pending workloads ask for: the pending ones were handed out and will take their room."""
        used = Resources.none()
        for uid in self.pending:
            w = self.workloads[uid]
            used += Resources.of(w.cpus, w.memory, w.gpus)
        for node in self.nodes:
            used += Resources.of(node.cpus - node.free_cpus, node.memory - node.free_memory, node.gpus - node.free_gpus)
        return used

    # --- time ---------------------------------------------------------------------------------

    def advance_to(self, t: float) -> None:
        if t < self.now:
            raise ValueError(f"the clock cannot go back from {self.now} to {t}")
        if t > self._last:
            # Busy GPUs were constant since the last event: a checkpoint where the integral stood.
            self._history.append((self._last, self._busy_integral, self.busy_gpus))
        self._busy_integral += self.busy_gpus * (t - self._last)
        self._last = self.now = t

    def busy_gpu_seconds(self, until: float | None = None) -> float:
        """∫ busy GPUs dt from 0 to `until` (now when None; not past now)."""
        until = self.now if until is None else min(until, self.now)
        i = bisect.bisect_right(self._history, until, key=lambda h: h[0]) - 1
        if i < 0:
            return 0.0
        at, integral, busy = self._history[i]
        if i == len(self._history) - 1 and until >= self._last:
            return self._busy_integral + self.busy_gpus * (until - self._last)
        return integral + busy * (until - at)

    def next_end(self) -> float | None:
        return self._ends[0][0] if self._ends else None

    # --- workloads -----------------------------------------------------------------------------

    def submit(
        self,
        uid: str,
        gpus: int,
        cpus: float,
        memory: int,
        duration: float,
        key: str = "",
        *,
        task: int | None = None,
        avoid: frozenset[int] = frozenset(),
    ) -> SimWorkload:
        """Take a workload (idempotent on uid); it starts now if it fits (not on the nodes of `avoid`), else waits in
        the runtime."""
        if uid in self.workloads:
            return self.workloads[uid]
        w = SimWorkload(
            uid, math.ceil(gpus), cpus, memory, duration, key=key, task=task, avoid=avoid, submitted_at=self.now
        )
        self.workloads[uid] = w
        if not self._start(w):
            self.pending.append(uid)
        return w

    def can_place(self, gpus: int, cpus: float, memory: int) -> bool:
        return self._placement(gpus, cpus, memory) is not None

    def _placement(
        self, gpus: int, cpus: float, memory: int, avoid: frozenset[int] = frozenset()
    ) -> list[tuple[int, int, float, int]] | None:
        g = self.gpus_per_node
        if gpus <= g:
            fitting = (i for i, node in enumerate(self.nodes) if i not in avoid and node.fits(gpus, cpus, memory))
            if self.placement == PACK:
                chosen = min(fitting, key=lambda i: (self.nodes[i].free_gpus, i), default=None)
            elif self.placement == SPREAD:
                chosen = min(fitting, key=lambda i: (-self.nodes[i].free_gpus, i), default=None)
            else:
                chosen = next(fitting, None)
            return None if chosen is None else [(chosen, gpus, cpus, memory)]
        # A multi-node job: whole idle nodes, its CPU and memory split evenly over them (all replicas or none).
        count = math.ceil(gpus / g)
        idle = [i for i, node in enumerate(self.nodes) if node.idle and i not in avoid]
        if len(idle) < count:
            return None
        return [(i, g, cpus / count, memory // count) for i in idle[:count]]

    def _start(self, w: SimWorkload) -> bool:
        placement = self._placement(w.gpus, w.cpus, w.memory, w.avoid)
        if placement is None:
            return False
        for i, gpus, cpus, memory in placement:
            node = self.nodes[i]
            node.free_gpus -= gpus
            node.free_cpus -= cpus
            node.free_memory -= memory
            if w.task is not None:
                node.holders[w.uid] = (w.task, Resources.of(cpus, memory, gpus))
        w.placement, w.phase, w.started_at = placement, Phase.RUNNING, self.now
        self.busy_gpus += sum(p[1] for p in placement)
        self.peak_busy_gpus = max(self.peak_busy_gpus, self.busy_gpus)
        self._seq += 1
        heapq.heappush(self._ends, (self.now + w.duration, self._seq, w.uid))
        if self.on_change:
            self.on_change(self)
        return True

    def finish_next(self) -> SimWorkload:
        """End the workload that ends first (the clock moves to its end); pending workloads that now fit start."""
        end, _seq, uid = heapq.heappop(self._ends)
        self.advance_to(end)
        w = self.workloads[uid]
        self._release(w, Phase.SUCCEEDED)
        return w

    def cancel(self, uid: str) -> None:
        w = self.workloads.get(uid)
        if w is None or w.phase not in (Phase.PENDING, Phase.RUNNING):
            return
        self.cancelled.append(uid)
        if w.phase == Phase.PENDING:
            self.pending.remove(uid)
            w.phase, w.ended_at = Phase.CANCELLED, self.now
            return
        self._ends = [e for e in self._ends if e[2] != uid]
        heapq.heapify(self._ends)
        self.lost_gpu_seconds += w.gpus * (self.now - (self.now if w.started_at is None else w.started_at))
        self._release(w, Phase.CANCELLED)

    def _release(self, w: SimWorkload, phase: Phase) -> None:
        for i, gpus, cpus, memory in w.placement:
            node = self.nodes[i]
            node.free_gpus += gpus
            node.free_cpus += cpus
            node.free_memory += memory
            node.holders.pop(w.uid, None)
        self.busy_gpus -= w.gpus
        w.phase, w.ended_at = phase, self.now
        if self.on_change:
            self.on_change(self)
        for uid in list(self.pending):
            if self._start(self.workloads[uid]):
                self.pending.remove(uid)


class SimulatedRuntime(Runtime):
    """The runtime interface over the `SimCluster` that `simulated_runtime()` installs (one at a time)."""

    name = NAME
    on_cluster = False
    can_preempt = True  # `cancel` frees the room at once; the replay reports the end (apps/jobs/simulation.py)
    cluster: SimCluster | None = None

    @property
    def _cluster(self) -> SimCluster:
        if SimulatedRuntime.cluster is None:
            raise LookupError("no simulated cluster is installed (use simulated_runtime())")
        return SimulatedRuntime.cluster

    def submit(self, workload: Workload) -> str:
        cluster = self._cluster
        if cluster.duration_of is None:
            raise LookupError("the simulated cluster does not know how long workloads run")
        key, duration = cluster.duration_of(workload)
        need = demand(workload.resources, total_replicas(workload.kind, workload.replicas))
        unknown = [name for name in workload.avoid_nodes if name not in cluster.node_index]
        if unknown:
            raise ValueError(f"avoid_nodes: no such node: {', '.join(unknown)}")
        cluster.submit(
            workload.uid, math.ceil(need.gpu), need.cpu, int(need.memory), duration, key=key,
            task=task_run_id(workload.labels.get("task_run")),
            avoid=frozenset(cluster.node_index[name] for name in workload.avoid_nodes),
        )  # fmt: skip
        return workload.uid

    def poll(self, handle: str) -> Status:
        w = self._cluster.workloads.get(handle)
        if w is None:
            return Status(Phase.LOST, reason="unknown to the simulated cluster")
        usage = {"wall_seconds": (w.ended_at or self._cluster.now) - w.started_at} if w.started_at is not None else {}
        return Status(w.phase, exit_code=0 if w.phase == Phase.SUCCEEDED else None, usage=usage)

    def cancel(self, handle: str) -> None:
        self._cluster.cancel(handle)

    def capacity(self) -> Capacity | None:
        cluster = SimulatedRuntime.cluster
        if cluster is None:
            return None
        total = cluster.total
        nodes = tuple(
            NodeRoom(
                Resources.of(n.free_cpus, n.free_memory, n.free_gpus),
                Resources.of(n.cpus, n.memory, n.gpus),
                name=n.name,
                holders=tuple(sorted(n.holders.values(), key=lambda h: h[0])),
            )
            for n in cluster.nodes
        )
        return Capacity.of(free=total - cluster.held(), total=total, nodes=nodes)


@contextlib.contextmanager
def simulated_runtime(cluster: SimCluster) -> Iterator[SimulatedRuntime]:
    """Install `cluster` as runtime "simulated" (and PORTAL_RUNTIME) for the block; everything as it was after."""
    from django.conf import settings

    before = (base.RUNTIMES.get(NAME), settings.PORTAL_RUNTIME, SimulatedRuntime.cluster)
    base.RUNTIMES[NAME] = f"{__name__}.SimulatedRuntime"
    settings.PORTAL_RUNTIME = NAME
    SimulatedRuntime.cluster = cluster
    base.get_runtime.cache_clear()
    try:
        yield base.get_runtime(NAME)
    finally:
        if before[0] is None:
            base.RUNTIMES.pop(NAME, None)
        else:
            base.RUNTIMES[NAME] = before[0]
        settings.PORTAL_RUNTIME, SimulatedRuntime.cluster = before[1], before[2]
        base.get_runtime.cache_clear()
