"""The greedy queue read a little at a time (docs/scheduling.md, "Cost per pass"): a dispatch pass costs what it
starts, not how long the queue is.

The waiting tasks come from the database in dispatch order (run priority, then age), in chunks that double. After
each chunk the pass asks whether anything behind it could still start: the tasks not yet read are grouped by what
their admission depends on — project, run in flight or not, resources, replicas — and by their stored waiting
reason (one GROUP BY; a few rows however long the queue), and one task of each group is asked, in the pass's state
now. When none could start, the pass stops reading. A task's admission depends on nothing else (a pipeline's
parallelism only refuses more; a task still in its retry backoff is skipped, as a full walk skips it), so a refused
representative means a refused group.

The tasks not read keep their waiting reason when it is still the one a full walk would give: each group's is
recomputed from its representative, and only a group whose reason changed is rewritten (one UPDATE). Two kinds of
task are read one by one instead, since their reasons depend on their own run: those of the runs the pass was
called for (an advance: a task of theirs ended or was created) and of the runs it started a task of; and a stored
"pipeline parallelism" reason is left as it is, since it changes only with its own run (which then is one of those).

The "backfill" queue (`BackfillQueue`) is read the same way in its own order, with its own rule for when to stop:
see the class.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Case, Expression, ExpressionWrapper, F, IntegerField, Min, Q, QuerySet, Value, When

from apps.jobs.models import PipelineRun, RunStatus, TaskRun, TaskStatus
from apps.jobs.runstate import hold_plans

LIVE = (RunStatus.QUEUED, RunStatus.RUNNING)
FIRST_CHUNK = 32
PARALLELISM = "waiting for a slot — pipeline parallelism"  # the prefix of a run-level reason (dispatcher._over_counts)
ORDER = ("-run__priority", "created_at", "pk")

# (the reason a task would be given now, whether it could start): the pass's `_place` in its state at the time.
Judge = Callable[[TaskRun], tuple[str, bool]]


class Queue:
    """One pass's walk of the waiting tasks in dispatch order; iterate it, then `settle()` the ones not read."""

    def __init__(self, known_runs: dict[int, PipelineRun], now: datetime, related: tuple[str, ...]) -> None:
        self.known_runs = known_runs
        self.now = now
        self.related = related
        self.waiting = TaskRun.objects.filter(status=TaskStatus.WAITING, run__status__in=LIVE)
        self.last: tuple[int, datetime, int] | None = None
        self.started_runs: set[int] = set()  # runs the pass started a task of (`started`)
        self.starts = 0
        self.read = 0
        self.stopped = False
        self._groups: list[tuple[dict[str, Any], str]] = []  # (group, the reason it would be given now)
        self._judge: Judge | None = None
        self._head: list[TaskRun] | None = None  # the first chunk, read by `head` before the walk

    def head(self) -> list[TaskRun]:
        """The first chunk's live tasks, with their runs (one query, none for the known runs). When it is the whole
        queue (`whole`), the pass takes its projects and limits from these tasks, as a full walk does, and asks for
        nothing more: an advance's pass over a short queue costs what it cost before the queue was read in chunks."""
        if self._head is None:
            self._head = self._chunk(FIRST_CHUNK)
        return [t for t in self._head if t.run.status in LIVE]

    @property
    def whole(self) -> bool:
        """Whether the first chunk holds every waiting task (`head` read it)."""
        assert self._head is not None
        return len(self._head) < FIRST_CHUNK

    def project_ids(self) -> set[int]:
        """The projects with waiting tasks (one DISTINCT query)."""
        return set(self.waiting.order_by().values_list("run__project_id", flat=True).distinct())

    def walk(self, judge: Judge) -> Iterator[TaskRun]:
        """The waiting tasks in dispatch order, with their runs, until none behind could start (asked with `judge`
        after each chunk, which sees what the tasks yielded so far took); then the unread ones of the runs touched."""
        self._judge = judge
        size = FIRST_CHUNK
        rows = self._head if self._head is not None else self._chunk(size)
        self._head = None
        while True:
            yield from (t for t in rows if t.run.status in LIVE)  # a known run's own status, as the advance has it
            self.read += len(rows)
            if len(rows) < size:
                return  # the whole queue was read
            self.last = (rows[-1].run.priority, rows[-1].created_at, rows[-1].pk)
            if not self._any_could_start():
                break
            size *= 2
            rows = self._chunk(size)
        self.stopped = True
        touched = set(self.known_runs) | self.started_runs
        if touched:
            rows = self._with_runs(list(self._rest().filter(run_id__in=touched).order_by(*ORDER)))
            self.read += len(rows)
            starts = self.starts
            yield from (t for t in rows if t.run.status in LIVE)
            if self.starts > starts:
                # One of them started (a run already in flight passes a concurrent-runs limit that its group's task
                # did not): the groups' reasons are asked again, in the state it left.
                self._any_could_start()

    def started(self, task: TaskRun) -> None:
        """The pass starts `task` (the dispatcher tells the walk, which reads its run's other tasks one by one)."""
        self.started_runs.add(task.run_id)
        self.starts += 1

    def settle(self) -> list[TaskRun]:
        """After the walk stopped: rewrite the reasons of the unread tasks whose group's reason changed; returns them
        (their new reason set)."""
        if not self.stopped:
            return []
        touched = set(self.known_runs) | self.started_runs
        changed: list[TaskRun] = []
        for group, reason in self._groups:
            stored = group["waiting_reason"]
            if reason == stored or stored.startswith(PARALLELISM):
                continue
            members = self._due().filter(
                run__project_id=group["run__project_id"],
                run__status=group["run__status"],
                replicas=group["replicas"],
                waiting_reason=stored,
            )
            if touched:
                members = members.exclude(run_id__in=touched)
            changed += _rewrite(members, group["resources"], reason)
        return changed

    def _rest(self) -> QuerySet[TaskRun]:
        """The waiting tasks after the last one read, in dispatch order."""
        if self.last is None:
            return self.waiting
        priority, created, pk = self.last
        return self.waiting.filter(
            Q(run__priority__lt=priority)
            | Q(run__priority=priority, created_at__gt=created)
            | Q(run__priority=priority, created_at=created, pk__gt=pk)
        )

    def _due(self) -> QuerySet[TaskRun]:
        """The unread tasks a pass may start now (not in a retry's backoff)."""
        return self._ready(self._rest())

    def _ready(self, tasks: QuerySet[TaskRun]) -> QuerySet[TaskRun]:
        """Those of `tasks` not in a retry's backoff."""
        return tasks.filter(Q(not_before__isnull=True) | Q(not_before__lte=self.now))

    def _chunk(self, size: int) -> list[TaskRun]:
        """The next `size` waiting tasks after the last one read, in dispatch order, with their runs."""
        return self._with_runs(list(self._rest().order_by(*ORDER)[:size]))

    def _with_runs(self, rows: list[TaskRun]) -> list[TaskRun]:
        """`rows`, each with its run (a known run's own status may no longer be live: the caller skips those)."""
        wanted = {t.run_id for t in rows}
        runs = {pk: run for pk, run in self.known_runs.items() if pk in wanted}
        if missing := wanted - runs.keys():
            runs.update(PipelineRun.objects.select_related(*self.related).defer("spec").in_bulk(missing))
        for task in rows:
            task.run = runs[task.run_id]
        hold_plans({t.run_id: t.run for t in rows if t.run.status in LIVE}.values())
        return rows

    def _any_could_start(self) -> bool:
        """Whether a task not read yet could start now: one of each group is asked."""
        fields = ("run__project_id", "run__status", "resources", "replicas", "waiting_reason")
        groups = list(self._due().order_by().values(*fields).annotate(rep=Min("pk")))
        reps = TaskRun.objects.select_related(*(f"run__{r}" for r in self.related)).in_bulk([g["rep"] for g in groups])
        assert self._judge is not None
        self._groups = []
        for group in groups:
            reason, could_start = self._judge(reps[group["rep"]])
            if could_start:
                return True
            self._groups.append((group, reason))
        return False


def _shape(resources: Any) -> str:
    return json.dumps(resources, sort_keys=True)


def _rewrite(members: QuerySet[TaskRun], resources: Any, reason: str) -> list[TaskRun]:
    """Give those of `members` whose resources are the group's (`resources`, compared as JSON with sorted keys) the
    group's new `reason` (one UPDATE); returns them as rewritten."""
    shape = _shape(resources)
    ids = [pk for pk, held in members.values_list("pk", "resources") if _shape(held) == shape]
    if not ids:
        return []
    TaskRun.objects.filter(pk__in=ids).update(waiting_reason=reason)
    return list(TaskRun.objects.filter(pk__in=ids))


@dataclass(frozen=True)
class Verdict:
    """What a backfill pass would do with a task it has not read, in its state now: the reason it would be given,
    whether it could start, the scopes (`queue_policy.Backfill.reserved`'s keys, none reserved yet) that its refusal
    may reserve, and the scopes whose reservation, made by a task ahead of it, would be checked before the one that
    holds it back now (and so could give it another reason)."""

    reason: str
    could_start: bool
    creates: frozenset[Any] = field(default_factory=frozenset)
    before: frozenset[Any] = field(default_factory=frozenset)


# (a task, the seconds it declares it runs — None: none —, whether they are known) → its verdict in the pass's state.
BackfillJudge = Callable[[TaskRun, float | None, bool], Verdict]
BACKFILL_ORDER = ("-eff", "rank", "created_at", "pk")
GROUPED_BY = ("run__project_id", "resources", "replicas", "timeout", "waiting_reason")


class BackfillQueue(Queue):
    """The "backfill" queue read in its own order a chunk at a time (docs/scheduling.md, "Backfill read in chunks").

    The order is `queue_policy.order_key`'s, computed by the database: the run's priority plus the aging level
    (`queue_policy.aging_level`: thresholds on `created_at`, the same integer as Python's), the project's rank by its
    dominant share (`queue_policy.share_ranks`, from the shares the pass computed before reading: they do not move
    within a pass), then age; keyset-paged on those values. The first chunk is read in the greedy order before the
    pass's state is built (`head`): a queue shorter than it is sorted in Python and walked whole, as before.

    After each chunk the tasks not read are grouped by what decides their fate in the pass's state: project, the run
    itself where its own state counts (a run with tasks active — its pipeline's parallelism — or in flight — its
    project's concurrent runs), resources, replicas, declared timeout (`TaskRun.timeout`) and stored reason; one task
    of each group is judged (`Verdict`). The walk stops when none could start and no reservation that a task not read
    would make could change another's reason. Why that is what the full walk does: a task not read that starts
    nothing changes only the pass's reservations (no room, quota or count is taken), and a new reservation can only
    hold more back. So, with none started, each task not read meets the state at the stop plus the reservations of the
    tasks before it. One refused for room, quota or a count gets its group's reason (they do not depend on
    reservations). One that fits now is held back by the first reservation it would delay, in a fixed order (the
    reserved nodes of its pool, its pool's total, its project's quota); that stays the one found at the stop unless a
    task ahead of it reserves a scope checked earlier — which the rule excludes (`Verdict.before` against
    `Verdict.creates`). A group whose timeout is not recorded (None: a node that declares none leaves it to its
    template, whose timeout may have changed since) could start for all the walk knows when it fits now: it is read.
    """

    def __init__(self, known_runs: dict[int, PipelineRun], now: datetime, related: tuple[str, ...]) -> None:
        super().__init__(known_runs, now, related)
        self.ordered = False
        self._read_ids: set[int] = set()  # the tasks `scan` read: those after them are the ones not read
        self._own: set[int] = set()
        self._verdicts: BackfillJudge | None = None
        self._own_runs: Callable[[], set[int]] = set

    def order(self, level: Expression, ranks: dict[int, int]) -> None:
        """Read from the first task again, in backfill's order: the run's priority plus `level` (an expression over
        `created_at`), then the project's rank (`ranks`, by project id; 0 for one not named), then age."""
        cases = [When(run__project_id=p, then=Value(r)) for p, r in ranks.items() if r]
        rank = Case(*cases, default=Value(0), output_field=IntegerField()) if cases else Value(0)
        eff = ExpressionWrapper(F("run__priority") + level, output_field=IntegerField())
        self.waiting = self.waiting.alias(eff=eff, rank=rank)
        self.ordered, self._head, self.last = True, None, None

    def scan(self, judge: BackfillJudge, own_runs: Callable[[], set[int]]) -> Iterator[TaskRun]:
        """The waiting tasks in backfill's order, with their runs, until the rest need not be read (after `order`).
        `own_runs()`: the runs whose tasks are grouped by run (their state counts), at each stop asked."""
        self._verdicts, self._own_runs = judge, own_runs
        size = FIRST_CHUNK
        while True:
            rows = self._chunk(size)
            yield from (t for t in rows if t.run.status in LIVE)
            self.read += len(rows)
            self._read_ids.update(t.pk for t in rows)
            if len(rows) < size:
                return
            last = rows[-1]
            self.last = (last.key_eff, last.key_rank, last.created_at, last.pk)
            if not self._read_on():
                self.stopped = True
                return
            size *= 2

    def settle(self) -> list[TaskRun]:
        """After the walk stopped: give the tasks not read the reason of their group where it changed (an UPDATE per
        such group); returns them."""
        if not self.stopped:
            return []
        changed: list[TaskRun] = []
        # The tasks not read are the waiting ones but those read: listed so, not by the order's keyset, whose CASE on
        # every row PostgreSQL planned as a nested loop over a queue just inserted (no statistics yet).
        unread = self._ready(self.waiting).exclude(pk__in=self._read_ids)
        for group, reason in self._groups:
            stored = group["waiting_reason"]
            if reason == stored:
                continue
            members = unread.filter(
                run__project_id=group["run__project_id"],
                replicas=group["replicas"],
                timeout=group["timeout"],
                waiting_reason=stored,
            )
            if group.get("own_run") is not None:
                members = members.filter(run_id=group["own_run"])
            elif self._own:
                members = members.exclude(run_id__in=self._own)
            changed += _rewrite(members, group["resources"], reason)
        return changed

    def _rest(self) -> QuerySet[TaskRun]:
        if not self.ordered or self.last is None:
            return super()._rest()
        eff, rank, created, pk = self.last
        return self.waiting.filter(
            Q(eff__lt=eff)
            | Q(eff=eff, rank__gt=rank)
            | Q(eff=eff, rank=rank, created_at__gt=created)
            | Q(eff=eff, rank=rank, created_at=created, pk__gt=pk)
        )

    def _chunk(self, size: int) -> list[TaskRun]:
        if not self.ordered:
            return super()._chunk(size)
        rows = self._rest().annotate(key_eff=F("eff"), key_rank=F("rank")).order_by(*BACKFILL_ORDER)[:size]
        return self._with_runs(list(rows))

    def _read_on(self) -> bool:
        """Whether the walk must read on: a task not read could start, or could be given another reason than its
        group's by a reservation that one not read would make."""
        own = self._own = self._own_runs()
        by_run = Case(When(run_id__in=own, then=F("run_id")), default=Value(None), output_field=IntegerField())
        rows = self._due().order_by().values(*GROUPED_BY, **({"own_run": by_run} if own else {}))
        groups = list(rows.annotate(rep=Min("pk")))
        reps = TaskRun.objects.select_related(*(f"run__{r}" for r in self.related)).in_bulk([g["rep"] for g in groups])
        assert self._verdicts is not None
        self._groups = []
        creates: set[Any] = set()
        before: set[Any] = set()
        for group in groups:
            timeout = group["timeout"]
            verdict = self._verdicts(reps[group["rep"]], float(timeout) if timeout else None, timeout is not None)
            if verdict.could_start:
                return True
            self._groups.append((group, verdict.reason))
            creates |= verdict.creates
            before |= verdict.before
        return bool(creates & before)
