"""Borrowing idle room above quota, and preempting it back (PORTAL_QUEUE_BORROWING, docs/scheduling.md).

Quotas are caps: a project may hold up to its quota and never more, even while the cluster idles. With borrowing on,
the queue (apps/jobs/dispatcher.py) also does this, in every pass:

- **Borrowers.** A waiting task of a preemptible node (its template's `preemptible`, frozen into the run) that its
  project's quota refuses may start *borrowed* on room of its pool that no other waiting task took: borrowers are
  tried after every task within its quota, in the queue's order. A borrowed task does not count against its quota
  (what a project holds within it is its other tasks) and may be preempted.
- **Claimants.** A waiting task that its quota admits but its pool has no room for gets borrowed tasks of *other*
  projects on that pool preempted, as many as its need takes with what is free and what is being freed already —
  and none when all of them would not start it, or when none stands in its way. Where the runtime names its nodes
  and the tasks on them, that is judged on the nodes: the task is placed (as the runtime places it) as if every
  borrowed task were gone, on the nodes whose borrowed tasks have run the fewest GPU-seconds first, and only the
  borrowed tasks on the nodes it would use are stopped, each node's youngest first (a claim by the pool's total
  stopped tasks on nodes it could not use, and one that stopped nothing still held the room). Elsewhere, youngest
  first (the least work lost). What is free now (on its nodes, where known) is set aside for it for the rest of the
  pass, so that no task behind it takes the room, and nothing is borrowed in that pool in the pass (the tasks
  preempted for it, requeued, would borrow the room back).
- The runtime is asked to stop a victim through its ordinary `cancel`; the task is marked `preempted_at` at once (a
  later pass counts its room as coming, not as borrowable again). When the runtime reports it cancelled, the
  orchestrator records it "preempted" and requeues its node as a new attempt in its old place in the queue
  (apps/jobs/orchestrator.py: `_requeue`); it later reruns from the start.
- A borrowed task whose project has room in its quota again is counted within it from then on (`adopt`, oldest
  first): a project back under its quota is not preempted for another.
- Only on runtimes that can preempt (`Runtime.can_preempt`); elsewhere nothing is borrowed, so nothing needs
  preempting. A non-preemptible task is never borrowed, hence never preempted.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from django.conf import settings

from apps.jobs import queue_policy
from apps.jobs.models import TASK_ACTIVE, TaskRun
from apps.jobs.runstate import plan_of
from apps.projects.models import Quota
from apps.runtime.base import get_runtime
from apps.runtime.placement import Pool, Pools
from apps.runtime.workload import NodeRoom, place_replicas
from portal.lib.resources import Resources


def enabled() -> bool:
    return bool(getattr(settings, "PORTAL_QUEUE_BORROWING", False))


@dataclass
class Victim:
    """A borrowed active task: what it holds, where, since when; `preempting` once asked to stop; `claimed` once a
    claimant of this pass counts its room."""

    pk: int
    project_id: int
    runtime: str
    handle: str
    holds: Resources
    since: datetime | None
    preempting: bool
    claimed: bool = False


class Borrowing:
    """One pass's borrowed tasks by runtime (the candidates for preemption) and waiting borrowers."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.victims: dict[str, list[Victim]] = defaultdict(list)
        self.borrowers: list[TaskRun] = []
        self.preempted: list[int] = []  # ids of the tasks this pass asked to stop
        # Pools where a claimant waits for room being freed for it: nothing is borrowed there in this pass, or the
        # tasks preempted for it (requeued) could borrow that room back and be preempted again, without end.
        self.claiming: set[Pool] = set()

    def active(self, row: dict[str, Any], holds: Resources) -> None:
        """An active task of the dispatcher's read (`ACTIVE_VALUES`); kept when it is borrowed."""
        if row["borrowed"]:
            since = row["started_at"] or row["queued_at"]
            victim = Victim(
                row["pk"],
                row["run__project_id"],
                row["runtime"],
                row["handle"],
                holds,
                since,
                row["preempted_at"] is not None,
            )
            self.victims[row["runtime"]].append(victim)

    def adopt(self, per_project: dict[int, Resources]) -> None:
        """Count borrowed tasks whose project has room in its quota again as within it, oldest first (they stop being
        borrowed: never preempted since), so that a project that fell back under its quota is not preempted for
        another. `per_project`: what each project holds within its quota, added to here."""
        candidates = sorted(
            (v for group in self.victims.values() for v in group if not v.preempting),
            key=lambda v: (v.since or self.now, v.pk),
        )
        if not candidates:
            return
        quotas = Quota.objects.in_bulk({v.project_id for v in candidates}, field_name="project_id")
        adopted = []
        for victim in candidates:
            quota = quotas.get(victim.project_id)
            held = per_project[victim.project_id]
            if quota is None or not quota.what_would_exceed(victim.holds, held):
                per_project[victim.project_id] = held + victim.holds
                adopted.append(victim.pk)
                self.victims[victim.runtime].remove(victim)
        if adopted:
            TaskRun.objects.filter(pk__in=adopted).update(borrowed=False)

    @staticmethod
    def may_borrow(task: TaskRun, pools: Pools) -> bool:
        """Whether the task may run above its quota: its node is preemptible and its pool's runtime can preempt."""
        if not plan_of(task.run).nodes[task.node].get("preemptible"):
            return False
        first = pools.of(task.run.project)
        return bool(first) and pools.runtime(first[0]).can_preempt

    def claim(self, task: TaskRun, pool: Pool, need: Resources, pools: Pools) -> str:
        """Preempt borrowed tasks of other projects for `task` (admitted by its quota, short of room in `pool`) when
        that starts it; returns what its waiting reason adds ("" when nothing is or will be freed for it).

        Where the runtime names its nodes and the tasks on them, the victims are those on the nodes where the task's
        replicas would then fit (`_on_nodes`); none when stopping every borrowed task would not place it — room
        freed elsewhere would not start it, and a claim sets the pool's room aside for the pass. Then, and where only
        the pool's total is known, youngest first until the total covers its need."""
        if not pools.runtime(pool).can_preempt:
            return ""
        free, _capacity = pools.free(pool)
        if free is None:
            return ""
        candidates = self.victims.get(pool.runtime, [])
        coming = [v for v in candidates if v.preempting and not v.claimed]
        others = sorted(
            (v for v in candidates if not v.preempting and v.project_id != task.run.project_id),
            key=lambda v: (v.since or self.now, v.pk),
            reverse=True,  # youngest first
        )
        order = [*coming, *others]
        nodes = pools.nodes(pool)
        chosen, placed = [], None
        if queue_policy.by_node(nodes):
            on_nodes = _on_nodes(nodes, order, Resources.from_json(task.resources), task.replicas, self.now)
            if on_nodes is None:
                return ""  # all of them would not place it: stop none
            chosen, placed = on_nodes
        available = free + sum((v.holds for v in chosen), Resources.none())
        for victim in order:
            if not available.exceeded_by(need):
                break
            if victim not in chosen:
                available += victim.holds
                chosen.append(victim)
        if available.exceeded_by(need) or not chosen:
            return ""  # all of them would not start it (or none stands in its way): stop none
        stopping = [v for v in chosen if not v.preempting]
        for victim in chosen:
            victim.claimed = True
        for victim in stopping:
            self._preempt(victim)
        # The room free now is the claimant's for the rest of the pass (on its nodes, where they are known).
        self.claiming.add(pool)
        if placed is not None:
            kept = [(i, _least(nodes[i].free, part)) for i, part in placed]
            pools.take(pool, sum((part for _i, part in kept), Resources.none()), placed=kept)
        else:
            pools.take(pool, _least(free, need))
        return "; borrowed tasks of other projects are being preempted for it"

    def _preempt(self, victim: Victim) -> None:
        stopped = TaskRun.objects.filter(pk=victim.pk, status__in=TASK_ACTIVE, preempted_at__isnull=True)
        if stopped.update(preempted_at=self.now):
            get_runtime(victim.runtime).cancel(victim.handle)
            self.preempted.append(victim.pk)
        victim.preempting = True


def _on_nodes(
    nodes: list[NodeRoom], order: list[Victim], replica: Resources, count: int, now: datetime
) -> tuple[list[Victim], list[tuple[int, Resources]]] | None:
    """The victims to stop so that `count` replicas of `replica` fit on `nodes` (each victim's room on a node is what
    the node's holders say it holds there), and where the replicas then go; None when stopping all of `order` would
    not place them. The replicas are placed as if every victim were gone, on the nodes whose victims have run the
    fewest GPU-seconds first (the least work lost), then each node they use is freed of its victims in `order`
    (coming first, then youngest) until its part fits."""
    where: dict[int, list[tuple[int, Resources]]] = defaultdict(list)  # task run id → (node index, held there)
    for i, room in enumerate(nodes):
        for holder, holds in room.holders:
            where[holder].append((i, holds))
    free = [room.free for room in nodes]
    most = list(free)  # each node's room with every victim gone
    lost = [0.0] * len(nodes)  # GPU-seconds run by the victims on each node
    for victim in order:
        ran = (now - (victim.since or now)).total_seconds()
        for i, holds in where.get(victim.pk, ()):
            most[i] += holds
            lost[i] += ran * holds.gpu
    cheapest = sorted(range(len(nodes)), key=lambda i: (lost[i], i))
    rooms = [replace(nodes[i], free=most[i]) for i in cheapest]
    found = place_replicas(rooms, replica, count)
    if found is None:
        return None
    placed = [(cheapest[k], part) for k, part in found]
    wanted: dict[int, Resources] = defaultdict(Resources.none)
    for i, part in placed:
        wanted[i] += part
    chosen: list[Victim] = []
    for i, part in wanted.items():
        for victim in order:
            if not free[i].exceeded_by(part):
                break
            if victim in chosen or not any(j == i for j, _h in where.get(victim.pk, ())):
                continue
            chosen.append(victim)
            for j, holds in where[victim.pk]:
                free[j] += holds
    return chosen, placed


def _least(a: Resources, b: Resources) -> Resources:
    return Resources.of(*(min(max(a.amount(n), 0), b.amount(n)) for n in ("cpu", "memory", "gpu")))
