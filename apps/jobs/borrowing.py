"""Borrowing idle room above quota, and preempting it back (PORTAL_QUEUE_BORROWING, docs/scheduling.md).

Quotas are caps: a project may hold up to its quota and never more, even while the cluster idles. With borrowing on,
the queue (apps/jobs/dispatcher.py) also does this, in every pass:

- **Borrowers.** A waiting task of a preemptible node (its template's `preemptible`, frozen into the run) that its
  project's quota refuses may start *borrowed* on room of its pool that no other waiting task took: borrowers are
  tried after every task within its quota, in the queue's order. A borrowed task does not count against its quota
  (what a project holds within it is its other tasks) and may be preempted.
- **Claimants.** A waiting task that its quota admits but its pool has no room for gets borrowed tasks of *other*
  projects on that pool preempted, youngest first (the least work lost), as many as its need takes with what is free
  and what is being freed already — and none when all of them would not cover it (stopping them would not start
  it). What is free now is set aside for it for the rest of the pass, so that no task behind it takes the room, and
  nothing is borrowed in that pool in the pass (the tasks preempted for it, requeued, would borrow the room back).
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
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings

from apps.jobs.models import TASK_ACTIVE, TaskRun
from apps.jobs.runstate import plan_of
from apps.projects.models import Quota
from apps.runtime.base import get_runtime
from apps.runtime.placement import Pool, Pools
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
        they cover its need; returns what its waiting reason adds ("" when nothing is or will be freed for it)."""
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
        available, chosen = free, []
        for victim in [*coming, *others]:
            if not available.exceeded_by(need):
                break
            available += victim.holds
            chosen.append(victim)
        if available.exceeded_by(need):
            return ""  # all of them would not start it: stop none
        stopping = [v for v in chosen if not v.preempting]
        for victim in chosen:
            victim.claimed = True
        for victim in stopping:
            self._preempt(victim)
        # The room free now is the claimant's for the rest of the pass.
        self.claiming.add(pool)
        pools.take(pool, Resources.of(*(min(max(free.amount(n), 0), need.amount(n)) for n in ("cpu", "memory", "gpu"))))
        return "; borrowed tasks of other projects are being preempted for it"

    def _preempt(self, victim: Victim) -> None:
        stopped = TaskRun.objects.filter(pk=victim.pk, status__in=TASK_ACTIVE, preempted_at__isnull=True)
        if stopped.update(preempted_at=self.now):
            get_runtime(victim.runtime).cancel(victim.handle)
            self.preempted.append(victim.pk)
        victim.preempting = True
