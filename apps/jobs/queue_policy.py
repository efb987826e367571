"""The queue's policy (docs/scheduling.md): in what order waiting tasks are tried, and when one may pass the task at
the head of the queue. `PORTAL_QUEUE_POLICY` chooses:

- "backfill": order by effective priority — the run's priority raised by one level per
  `PORTAL_QUEUE_AGING_SECONDS` waited, at most `PORTAL_QUEUE_AGING_MAX` levels (aging: no task waits forever behind a
  stream of higher-priority ones) — then by the project's dominant share of its quota (fair share: among equal
  priorities, the project holding the least of its quota goes first; `PORTAL_QUEUE_FAIR_SHARE = False` leaves it
  out), then by age. The first task that cannot start
  for want of room gets a reservation: the earliest time its pool will have room for it, from the running tasks'
  declared ends (their timeouts; `PORTAL_QUEUE_DEFAULT_ESTIMATE` seconds for one without). A task behind it may
  start only if it does not delay that time: it ends before it (by its own timeout), or it fits in what is left at
  that time beside the head (EASY backfill, Lifka 1995). Where the runtime names its nodes and says which tasks
  hold them (the simulated cluster; a Kubernetes cluster's inventory), the reservation is of nodes: those where the
  head fits earliest as their tasks end; a task that would run past that time starts off them or within what they
  have to spare beside the head, and is submitted kept off the others (`Workload.avoid_nodes`).
  Admission checks the nodes the runtime reports: all of a task's replicas fit on them now, or none starts (gang).
- "greedy" (the default; the dispatcher before issue #31's second part): order by priority, then age, and start every
  task that fits in its pool's total; a large task waits while smaller ones keep taking the room it needs. It stays
  the default until the bench shows "backfill" at least as good on every count (docs/scheduling.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Case, Expression, IntegerField, Value, When

from apps.runtime.workload import NodeRoom, place_replicas
from portal.lib.resources import UNLIMITED, Resources

POLICIES = ("backfill", "greedy")


def current() -> str:
    """The policy the queue follows now ("backfill" or "greedy"). An unknown name is a system check's error
    (apps/jobs/checks.py, jobs.E001); should a process run past it, the queue keeps the default, "greedy"."""
    name = getattr(settings, "PORTAL_QUEUE_POLICY", "greedy")
    return name if name in POLICIES else "greedy"


def effective_priority(priority: int, waited_seconds: float) -> int:
    """The run's priority raised by one level per aging interval waited, by at most PORTAL_QUEUE_AGING_MAX levels."""
    step = settings.PORTAL_QUEUE_AGING_SECONDS
    if step <= 0 or waited_seconds <= 0:
        return priority
    return priority + min(int(waited_seconds // step), settings.PORTAL_QUEUE_AGING_MAX)


def aging_level(now: datetime) -> Expression:
    """The aging levels `effective_priority` adds, as a database expression over a task's `created_at` (the queue
    read in order a chunk at a time, apps/jobs/queue_scan.py): thresholds, no division, so that the level is the same
    integer: `int(waited // step) >= k` exactly when `created_at <= now - k × step`."""
    step, top = settings.PORTAL_QUEUE_AGING_SECONDS, settings.PORTAL_QUEUE_AGING_MAX
    if step <= 0 or top == 0:
        return Value(0, output_field=IntegerField())
    if top < 0:  # min(levels, top) is `top` for any wait at all
        return Case(When(created_at__lt=now, then=Value(top)), default=Value(0), output_field=IntegerField())
    levels = [When(created_at__lte=now - timedelta(seconds=k * step), then=Value(k)) for k in range(top, 0, -1)]
    return Case(*levels, default=Value(0), output_field=IntegerField())


def share_ranks(shares: dict[int, float]) -> dict[int, int]:
    """Each project's place among the distinct dominant shares (0: the smallest): ordering by it is ordering by the
    share, ties kept, without comparing floats in the database."""
    distinct = sorted(set(shares.values()))
    return {project_id: distinct.index(share) for project_id, share in shares.items()}


def dominant_share(project: Any, held: Resources) -> float:
    """The largest fraction of any of its quota's limits (CPU, memory, GPUs) that the project holds; 0 without
    limits (a project with no quota is never behind one that has a share to protect)."""
    quota = getattr(project, "quota", None)
    if quota is None:
        return 0.0
    limits = quota.limits
    shares = [
        held.amount(name) / limits.amount(name)
        for name in ("gpu", "cpu", "memory")
        if limits.amount(name) not in (UNLIMITED, 0)
    ]
    return max(shares, default=0.0)


def order_key(task: Any, now: datetime, held: dict[int, Resources]) -> tuple:
    """Sort key of a waiting task (its `run` with `project`, `quota` loaded) under the backfill policy."""
    run = task.run
    waited = (now - task.created_at).total_seconds()
    fair = getattr(settings, "PORTAL_QUEUE_FAIR_SHARE", True)
    share = dominant_share(run.project, held.get(run.project_id, Resources.none())) if fair else 0.0
    return (-effective_priority(run.priority, waited), share, task.created_at, task.pk)


@dataclass
class Reservation:
    """The head of a pool's queue: from `at` its need is set aside; `extra` is what is left beside it then. A
    reservation of nodes sets room aside on those nodes instead: a task that would run past `at` may use no more of a
    reserved node than its `spare`."""

    task: Any
    at: datetime
    extra: Resources
    # A reservation of nodes: what is left at `at` on each reserved node (by index) beside the head, and their names.
    spare: dict[int, Resources] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)

    @property
    def waiting(self) -> str:
        # English, as every stored waiting reason (docs/i18n.md); no time in it, so that it changes only with the head.
        run = self.task.run
        return f"waiting for its turn — room is reserved for run {run.project.slug} #{run.number}, ahead in the queue"


class Backfill:
    """One pass's reservations (EASY backfill), at most one per scope: a pool (its capacity) or a project's quota
    ("quota", project id), so that neither room nor quota is taken from the head by tasks behind it. `running` is, by
    scope, the (expected end, what it holds) of every active task: its declared end (`TaskRun.ends_by`) or its start
    plus the default estimate (`estimated_end`)."""

    def __init__(self, now: datetime, running: dict[Any, list[tuple[datetime, Resources]]]) -> None:
        self.now = now
        self.running = running
        self.reserved: dict[Any, Reservation] = {}

    def reserve(
        self,
        scope: Any,
        task: Any,
        need: Resources,
        free: Resources | None,
        *,
        whole_nodes: bool = False,
        now_too: bool = False,
    ) -> Reservation | None:
        """Give `task` (which cannot start now for want of `scope`'s room) the scope's reservation, unless one is held:
        the earliest expected end after which `free` plus what has ended covers `need`. None when one is held or the
        running tasks' ends never free enough. `whole_nodes`: the task needs nodes to itself (a gang over several
        nodes); the ends say when enough is free in total, not on which nodes, so nothing may keep room past that
        time beside it. `now_too`: the reservation may be for now (a quota that has room now for a task waiting for
        room); else it is at the first end that frees enough (a pool refused it although its total has room: its
        nodes do not)."""
        if scope in self.reserved or free is None:
            return None
        ends = sorted(self.running.get(scope, ()), key=lambda e: e[0])
        ends = [(self.now, Resources.none()), *ends] if now_too else ends
        available = free
        for end, holds in ends:
            available += holds
            if not available.exceeded_by(need):
                extra = Resources.none() if whole_nodes else available - need
                reservation = Reservation(task, max(end, self.now), extra)
                self.reserved[scope] = reservation
                return reservation
        return None

    def reserve_nodes(
        self,
        scope: Any,
        task: Any,
        replica: Resources,
        count: int,
        nodes: list[NodeRoom],
        ends: dict[int, datetime],
    ) -> Reservation | None:
        """Give `task` (`count` replicas of `replica`, which fit nowhere now) the nodes where they will all fit
        earliest, unless `scope` (a pool) has a reservation already: the tasks holding room on each node (its
        `holders`) free it at their expected ends (`ends`, by task run id; a holder not there keeps its room), and
        the first end after which the replicas fit — placed as the runtime places them — gives the time and the
        nodes. None when no end frees enough."""
        if scope in self.reserved or not nodes:
            return None
        releases = [(ends[t], i, holds) for i, room in enumerate(nodes) for t, holds in room.holders if t in ends]
        releases.sort(key=lambda r: (r[0], r[1]))
        free = [room.free for room in nodes]
        k = 0
        while k < len(releases):
            at = releases[k][0]
            while k < len(releases) and releases[k][0] == at:
                _end, i, holds = releases[k]
                free[i] += holds
                k += 1
            rooms = [NodeRoom(free[i], room.total) for i, room in enumerate(nodes)]
            placed = place_replicas(rooms, replica, count)
            if placed is not None:
                spare = {i: free[i] for i, _part in placed}
                for i, part in placed:
                    spare[i] -= part
                names = {i: nodes[i].name for i in spare}
                reservation = Reservation(task, max(at, self.now), Resources.none(), spare=spare, names=names)
                self.reserved[scope] = reservation
                return reservation
        return None

    def nodes_kept(self, scope: Any, seconds: float | None) -> Reservation | None:
        """The reservation of nodes in `scope` that a task starting now and running `seconds` (None: undeclared)
        would still hold room past: the task may then take no more of a reserved node than its spare."""
        reservation = self._past(scope, seconds)
        return reservation if reservation is not None and reservation.spare else None

    def blocker(self, scopes: list[Any], need: Resources, seconds: float | None) -> Reservation | None:
        """The reservation that a task fitting now in all `scopes` (needing `need` for at most `seconds`: its timeout,
        None when it declares none) would delay; None when it may start — then what it keeps past each reservation's
        time is set aside from what is left there."""
        if found := self.blocking(scopes, need, seconds):
            return found[1]
        self.set_aside(scopes, need, seconds)
        return None

    def blocking(self, scopes: list[Any], need: Resources, seconds: float | None) -> tuple[Any, Reservation] | None:
        """`blocker`'s answer and its scope, changing nothing (the queue read in chunks asks it of tasks not read)."""
        for scope in scopes:
            reservation = self._past(scope, seconds)
            if reservation is not None and reservation.extra.exceeded_by(need):
                return scope, reservation
        return None

    def set_aside(self, scopes: list[Any], need: Resources, seconds: float | None) -> None:
        """A task that `blocking` lets start keeps `need` past each reservation's time: taken from what is left
        there."""
        for scope in scopes:
            if (reservation := self._past(scope, seconds)) is not None:
                reservation.extra -= need

    def _past(self, scope: Any, seconds: float | None) -> Reservation | None:
        """The reservation of `scope` when a task starting now and running `seconds` would still hold room past it."""
        reservation = self.reserved.get(scope)
        if reservation is None or (seconds is not None and self.now + timedelta(seconds=seconds) <= reservation.at):
            return None
        return reservation

    def started(self, scopes: list[Any], need: Resources, seconds: float | None) -> None:
        """A task starts in this pass: it holds `need` in each of `scopes` until its declared end."""
        end = self.now + timedelta(seconds=seconds if seconds is not None else settings.PORTAL_QUEUE_DEFAULT_ESTIMATE)
        for scope in scopes:
            self.running.setdefault(scope, []).append((end, need))


def quota_scope(project_id: int) -> tuple[str, int]:
    return ("quota", project_id)


def nodes_scope(pool: Any) -> tuple[str, Any]:
    """The scope of a reservation of a pool's nodes (where its runtime reports them by name)."""
    return ("nodes", pool)


def by_node(nodes: tuple[NodeRoom, ...] | list[NodeRoom]) -> bool:
    """Whether reservations in a pool with these nodes can be of nodes: the runtime names them (so that a task can
    be kept off them) and says which tasks hold room on them."""
    return bool(nodes) and all(room.name for room in nodes)


def estimated_end(ends_by: datetime | None, since: datetime | None, now: datetime) -> datetime:
    """When an active task is expected to end: its declared end, else its start (or now) plus the default estimate;
    never before now (a task past its declared end ends any moment)."""
    end = ends_by or (since or now) + timedelta(seconds=settings.PORTAL_QUEUE_DEFAULT_ESTIMATE)
    return max(end, now)
