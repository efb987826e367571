"""The queue: hands waiting tasks to the runtime in priority order while quotas, capacity and pipeline
parallelism allow, and tells the ones that wait why ("waiting for 2 GPUs — quota 4/4 in use").

One dispatcher at a time (a row lock), in its own transaction after an advance: it updates tasks of every
run, so holding a run's lock while taking the dispatch lock could deadlock with another run's advance.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone, translation

from apps.jobs import borrowing as borrowing_
from apps.jobs import queue_policy, sparkui
from apps.jobs.args import to_cli_args
from apps.jobs.diagnosis import Facts, diagnose
from apps.jobs.models import TASK_ACTIVE, Image, JobTemplate, PipelineRun, RunStatus, TaskRun, TaskStatus
from apps.jobs.queue_scan import BackfillQueue, Queue, Verdict
from apps.jobs.references import local_args
from apps.jobs.runstate import hold_plans, plan_of
from apps.projects.models import Project
from apps.projects.usage import held
from apps.runtime import strategy as strategies
from apps.runtime.admission import admit
from apps.runtime.base import get_runtime, site_url
from apps.runtime.kubernetes.manifests.meta import registry_secret_name
from apps.runtime.local.launch import free_port
from apps.runtime.placement import Pool, Pools
from apps.runtime.workload import Workload, demand
from portal.lib.resources import Resources

# Tokens of task attempts: long enough for any task, revoked the moment the attempt ends.
TASK_TOKEN_DAYS = 7


def env_name(node: str) -> str:
    return "PORTAL_INPUT_" + node.upper().replace("-", "_")


def output_dir(task: TaskRun) -> Path:
    run = task.run
    return (
        Path(settings.PORTAL_WORK_DIR) / run.project.slug / f"run-{run.number}" / task.node / f"attempt-{task.attempt}"
    )


def dispatch(
    *,
    wait: bool = True,
    known_runs: dict[int, PipelineRun] | None = None,
    known_outputs: dict[tuple[int, str], str] | None = None,
) -> dict[int, dict[str, TaskRun]] | None:
    """Submit waiting tasks that fit; tell the others why they wait.

    Returns the tasks whose state changed (queued, or a new waiting reason), by run id and node. From an advance,
    inside its transaction: `wait=False` returns None at once when another pass holds the queue; `known_runs`
    (read in this transaction with RUN_RELATED, the run the advance holds) and `known_outputs` (output directories
    of upstream attempts by (run id, node)) are not read again.
    """
    changed: dict[int, dict[str, TaskRun]] = defaultdict(dict)
    with transaction.atomic():
        if not _lock_queue(wait):
            return None
        now = timezone.now()
        backfill = queue_policy.current() == "backfill"
        borrowing = borrowing_.Borrowing(now) if borrowing_.enabled() else None
        # Either policy reads the queue in the database's order, a chunk at a time, until none behind could start
        # ("backfill" in its own order, once the pass knows the shares held: `BackfillQueue`); with borrowing, whole
        # (a task refused by its quota may still start, borrowed, after all the others).
        if borrowing is not None:
            queue = None
        else:
            queue = (BackfillQueue if backfill else Queue)(known_runs or {}, now, RUN_RELATED)
        waiting = _waiting(known_runs or {}) if queue is None else queue.head()
        # The pass's state is built for the projects of the tasks it may read. A queue read whole (with borrowing, or
        # one no longer than its first chunk: an advance's, mostly) names them, and whether any of its tasks has a
        # limit that usage counts against (none: the active tasks, notebooks and servers are not read). Past the
        # first chunk, the tasks not read yet may be of any project with waiting tasks, and limited.
        whole = queue is None or queue.whole
        if whole:
            projects = {t.run.project_id: t.run.project for t in waiting}
        else:
            projects = Project.objects.select_related("quota").in_bulk(queue.project_ids())
        if not projects:
            return {}
        pools = Pools()
        # Resources and tasks in use, and the runs in flight, per project; active tasks per run.
        per_project: dict[int, Resources] = defaultdict(Resources.none)
        tasks_of: dict[int, int] = defaultdict(int)
        in_flight: dict[int, set[int]] = defaultdict(set)
        per_run: dict[int, int] = defaultdict(int)
        counted = any(_limited(t) for t in waiting) if whole else True
        # What the active tasks hold and, for reservations, when each is expected to end: by runtime (a pool's
        # reservation counts every task of its runtime: the rows do not say which cluster) and by project (its quota).
        running: dict[Any, list] = defaultdict(list)
        fields = ["run_id", "run__project_id", "resources", "replicas", "borrowed"]
        fields += ["pk", "runtime", "queued_at", "started_at", "ends_by"] if backfill or borrowing else []
        fields += ["handle", "preempted_at"] if borrowing else []
        ends: dict[int, Any] = {}  # backfill: each active task's expected end, by id (for reservations of nodes)
        active = TaskRun.objects.filter(status__in=TASK_ACTIVE).values(*fields)
        for row in active if counted or backfill or borrowing else ():
            holds = task_demand(row["resources"], row["replicas"])
            # A borrowed task runs above its quota: it does not count against it (while borrowing is on; after, it does
            # until it ends).
            within = not (row["borrowed"] and borrowing is not None)
            if within:
                per_project[row["run__project_id"]] += holds
            tasks_of[row["run__project_id"]] += 1
            per_run[row["run_id"]] += 1
            in_flight[row["run__project_id"]].add(row["run_id"])
            if backfill:
                since = row["started_at"] or row["queued_at"]
                end = ends[row["pk"]] = queue_policy.estimated_end(row["ends_by"], since, now)
                running[row["runtime"]].append((end, holds))
                if within:
                    running[queue_policy.quota_scope(row["run__project_id"])].append((end, holds))
            if borrowing is not None:
                borrowing.active(row, holds)
        if borrowing is not None:
            borrowing.adopt(per_project)
        # A run is in flight from its first task's start to its end, also while none of its tasks is active (between
        # two nodes, or a retry waiting for its backoff): it keeps its slot, which a new run must not take.
        if by_runs := {pk for pk, p in projects.items() if _run_limit(p) is not None}:
            started = PipelineRun.objects.filter(
                project_id__in=by_runs, status__in=(RunStatus.RUNNING, RunStatus.CANCELLING)
            ).values_list("project_id", "pk")
            for project_id, run_id in started:
                in_flight[project_id].add(run_id)
        # Notebooks and model servers hold quota too (not a task slot): a node waits while they hold its share.
        limited = {t.run.project_id for t in waiting if _limited(t)} if whole else set(projects)
        for project_id, usage in (held(limited) if counted else {}).items():
            per_project[project_id] += usage
        plan = queue_policy.Backfill(now, running) if backfill else None
        if plan is not None and whole:
            waiting.sort(key=lambda t: queue_policy.order_key(t, now, per_project))
        elif plan is not None:
            # The same order from the database: the shares as `order_key` computes them, once, before the walk.
            fair = getattr(settings, "PORTAL_QUEUE_FAIR_SHARE", True)
            shares = {
                pk: queue_policy.dominant_share(project, per_project.get(pk, Resources.none())) if fair else 0.0
                for pk, project in projects.items()
            }
            queue.order(queue_policy.aging_level(now), queue_policy.share_ranks(shares))
        timeouts = _Timeouts(waiting)
        chosen: list[tuple[TaskRun, Pool]] = []

        def judge(task: TaskRun) -> tuple[str, bool]:
            # For the tasks a greedy pass does not read: their pipelines' parallelism aside (it only refuses more).
            reason, pool, _short = _place(task, per_project, tasks_of, in_flight, defaultdict(int), pools)
            return reason, pool is not None

        def verdict(task: TaskRun, seconds: float | None, known: bool) -> Verdict:
            # For the tasks a backfill pass does not read, one of a group: what the walk would do with it now.
            assert plan is not None
            placed = _place(task, per_project, tasks_of, in_flight, per_run, pools, gang=True)
            return _backfill_verdict(plan, pools, task, placed, seconds, known)

        def own_runs() -> set[int]:
            # Runs whose own state bears on their tasks: tasks active (parallelism), in flight (concurrent runs).
            return {pk for pk, count in per_run.items() if count} | set().union(*in_flight.values())

        if queue is None or (plan is not None and whole):
            tasks = iter(waiting)
        elif isinstance(queue, BackfillQueue):
            tasks = queue.scan(verdict, own_runs)
        else:
            tasks = queue.walk(judge)
        for task in tasks:
            if task.not_before and task.not_before > now:
                continue
            need = task_demand(task.resources, task.replicas)
            reason, pool, short_of = _place(task, per_project, tasks_of, in_flight, per_run, pools, gang=backfill)
            placed = None  # where on the pool's nodes it goes, when a reservation of nodes decides it
            if plan is not None:
                project = task.run.project
                quota = queue_policy.quota_scope(project.pk)
                if pool is None and short_of == "room" and (first := pools.of(project)):
                    _reserve_room(plan, pools, first[0], task, need, ends)
                if pool is None and short_of and getattr(project, "quota", None) is not None:
                    # Its share of the quota too (free now when it waits for room): its own project's later tasks
                    # must not take it meanwhile.
                    plan.reserve(quota, task, need, project.quota.limits - per_project[project.pk], now_too=True)
                elif pool is not None:
                    seconds = timeouts.of(task)
                    holder, placed = _beside_reservations(plan, pools, pool, task, need, [pool.runtime, quota], seconds)
                    if holder is not None:
                        reason, pool = holder.waiting, None
            if borrowing is not None and pool is None:
                if short_of == "quota" and borrowing.may_borrow(task, pools):
                    borrowing.borrowers.append(task)  # tried once every task within its quota has been
                elif short_of == "room" and (first := pools.of(task.run.project)) and _may_claim(plan, first[0], task):
                    reason += borrowing.claim(task, first[0], need, pools)
            if pool is None:
                if task.waiting_reason != reason:
                    task.waiting_reason = reason
                    task.save(update_fields=["waiting_reason"])
                    changed[task.run_id][task.node] = task
                continue
            chosen.append((task, pool))
            changed[task.run_id][task.node] = task
            if queue is not None:
                queue.started(task)
            pools.take(pool, need, Resources.from_json(task.resources), task.replicas, placed)
            per_project[task.run.project_id] += need
            tasks_of[task.run.project_id] += 1
            per_run[task.run_id] += 1
            in_flight[task.run.project_id].add(task.run_id)
        for task in borrowing.borrowers if borrowing is not None else ():
            # Idle room that no task within its quota took: borrowed, preemptible, not counted against the quota.
            need = task_demand(task.resources, task.replicas)
            _reason, pool, _short = _place(
                task, per_project, tasks_of, in_flight, per_run, pools, gang=backfill, borrow=True
            )
            if pool is None or pool in borrowing.claiming:
                continue  # it keeps the reason its quota gave
            placed = None
            if plan is not None:
                # Nor room reserved for the head: a claimant that preempted for room, then found it reserved, would
                # see its victims borrow that room back, and preempt them again, without end.
                holder, placed = _beside_reservations(plan, pools, pool, task, need, [pool.runtime], timeouts.of(task))
                if holder is not None:
                    continue
            task.borrowed = True
            chosen.append((task, pool))
            changed[task.run_id][task.node] = task
            pools.take(pool, need, Resources.from_json(task.resources), task.replicas, placed)
            tasks_of[task.run.project_id] += 1
            per_run[task.run_id] += 1
            in_flight[task.run.project_id].add(task.run_id)
        for task in queue.settle() if queue is not None else ():
            changed[task.run_id][task.node] = task
        if chosen:
            _submit(chosen, now, known_outputs or {})
    return changed


def task_demand(resources: dict[str, Any] | None, replicas: int) -> Resources:
    """What a task holds of its project's quota and its pool's capacity: its per-replica resources × its replicas."""
    return demand(Resources.from_json(resources), replicas)


RUN_RELATED = ("project__quota", "created_by")  # what dispatching needs of a task's run, read with it


def _waiting(known_runs: dict[int, PipelineRun]) -> list[TaskRun]:
    """Waiting tasks of queued and running runs in dispatch order (run priority, then age), with their runs.
    Two plain queries (none for runs the caller knows): compiling one join of five tables cost more than both."""
    tasks = list(TaskRun.objects.filter(status=TaskStatus.WAITING))
    if not tasks:
        return []
    runs = dict(known_runs)
    if missing := {t.run_id for t in tasks} - runs.keys():
        runs.update(PipelineRun.objects.select_related(*RUN_RELATED).defer("spec").in_bulk(missing))
    live = {pk: run for pk, run in runs.items() if run.status in (RunStatus.QUEUED, RunStatus.RUNNING)}
    waiting = [t for t in tasks if t.run_id in live]
    for task in waiting:
        task.run = live[task.run_id]
    hold_plans({t.run_id: t.run for t in waiting}.values())  # one query for their specs, not one per run
    waiting.sort(key=lambda t: (-t.run.priority, t.created_at, t.pk))
    return waiting


def _lock_queue(wait: bool) -> bool:
    """Take the queue's lock (a row, so that two passes never hand out the same room) for this transaction;
    `wait=False`: only when nobody holds it."""
    from apps.runtime.models import DispatchLock

    if wait:
        DispatchLock.objects.select_for_update().get_or_create(pk=1)
        return True
    if DispatchLock.objects.select_for_update(skip_locked=True).filter(pk=1).values_list("pk", flat=True):
        return True
    if DispatchLock.objects.filter(pk=1).exists():
        return False  # held by another pass
    DispatchLock.objects.select_for_update().get_or_create(pk=1)  # the very first pass creates the row
    return True


def _limited(task: TaskRun) -> bool:
    """Whether usage counts for the task: its pipeline caps parallelism or its project has a quota limit."""
    quota = getattr(task.run.project, "quota", None)
    return bool(plan_of(task.run).parallelism) or (quota is not None and quota.limits_anything)


def _run_limit(project: Project) -> int | None:
    quota = getattr(project, "quota", None)
    return quota.concurrent_runs if quota is not None else None


def _place(
    task: TaskRun, per_project, tasks_of, in_flight, per_run, pools: Pools, *, gang: bool = False, borrow: bool = False
) -> tuple[str, Pool | None, str]:
    """The pool the task goes to now, or why it waits (the first pool's reason when none has room), and what it is
    short of: "room", "quota" (its project's resources quota), or "" (it may start, or waits for a count: parallelism,
    concurrent runs or tasks). `borrow`: room only, above its quota (apps/jobs/borrowing.py)."""
    reason = _over_counts(task, tasks_of, in_flight, per_run)
    if reason:
        return reason, None, ""
    run = task.run
    need = task_demand(task.resources, task.replicas)
    # A waiting reason is stored and shown to everyone as written: English, whoever's request ran the pass (i18n.md).
    with translation.override("en"):
        # `gang` (the "backfill" policy): all its replicas must fit on the nodes the runtime reports; else the pool's
        # total.
        replica = Resources.from_json(task.resources) if gang else None
        admission = admit(
            run.project,
            need,
            in_use=per_project[run.project_id],
            pools=pools,
            replica=replica,
            replicas=task.replicas,
            quota=not borrow,
        )
        if admission.pool is None:
            return admission.refusal.waiting, None, "room" if admission.shortfall is None else "quota"
    return "", admission.pool, ""


def _reserve_room(plan: queue_policy.Backfill, pools: Pools, pool: Pool, task: TaskRun, need, ends) -> None:
    """The head's reservation in `pool`, which has no room for it now: of nodes where the runtime names them and
    says which tasks hold them (the nodes where it fits earliest, as the tasks on them end), else of the pool's
    total (all of it past that time when the task needs nodes to itself: the total says when, not where)."""
    free, capacity = pools.free(pool)
    if capacity is not None and queue_policy.by_node(capacity.nodes):
        replica = Resources.from_json(task.resources)
        nodes = pools.nodes(pool)
        if plan.reserve_nodes(queue_policy.nodes_scope(pool), task, replica, task.replicas, nodes, ends):
            return
    plan.reserve(pool.runtime, task, need, free, whole_nodes=_spans_nodes(task, pools, pool))


def _may_claim(plan: queue_policy.Backfill | None, pool: Pool, task: TaskRun) -> bool:
    """Whether a task short of room may have borrowed tasks preempted for it: under "greedy" any task; under
    "backfill" only the head, the one holding the pool's reservation (room freed for another would go to it, and at
    saturation every waiting task would preempt every borrowed one)."""
    if plan is None:
        return True
    held = plan.reserved.get(queue_policy.nodes_scope(pool)) or plan.reserved.get(pool.runtime)
    return held is not None and held.task is task


@dataclass
class _Kept:
    """A reservation of nodes that a task would hold room past, and where the task fits beside it: on nodes outside
    it, or within a reserved node's spare (None: nowhere)."""

    reservation: queue_policy.Reservation
    placed: list[tuple[int, Resources]] | None

    def started(self) -> list[str]:
        """The task starts where `placed` says: debit the spare it takes; the reserved nodes it must keep off."""
        used = set()
        for i, part in self.placed or ():
            if i in self.reservation.spare:
                self.reservation.spare[i] -= part
                used.add(i)
        return sorted(name for i, name in self.reservation.names.items() if i not in used)


def _nodes_kept(plan: queue_policy.Backfill, pools: Pools, pool: Pool, task: TaskRun, seconds) -> _Kept | None:
    """None when no reservation of `pool`'s nodes stands in the task's way (none, or the task ends before it)."""
    reservation = plan.nodes_kept(queue_policy.nodes_scope(pool), seconds)
    if reservation is None:
        return None
    replica = Resources.from_json(task.resources)
    return _Kept(reservation, pools.placement(pool, replica, task.replicas, limit=reservation.spare))


def _beside_reservations(
    plan: queue_policy.Backfill, pools: Pools, pool: Pool, task: TaskRun, need: Resources, scopes: list, seconds
) -> tuple[queue_policy.Reservation | None, list[tuple[int, Resources]] | None]:
    """Whether a task that fits now in `pool` may start beside the pass's reservations: the reservation it would
    delay (then it waits), else None and where it goes on the pool's nodes when a reservation of nodes decided that
    (None: where `Pools.take` puts it). A task that may start is counted in `scopes` until its declared end, and
    told the reserved nodes it must keep off (`kept_off`, for its workload's `avoid_nodes`)."""
    held, kept = _held_back(plan, pools, pool, task, need, scopes, seconds)
    if held is not None:
        return held[1], None
    plan.set_aside(scopes, need, seconds)
    plan.started(scopes, need, seconds)
    task.kept_off = kept.started() if kept is not None else []
    return None, kept.placed if kept is not None else None


def _held_back(
    plan: queue_policy.Backfill, pools: Pools, pool: Pool, task: TaskRun, need: Resources, scopes: list, seconds
) -> tuple[tuple[Any, queue_policy.Reservation] | None, _Kept | None]:
    """The first reservation that a task fitting now in `pool` would delay, and its scope, checked in this order: the
    reserved nodes of the pool, then `scopes` (None: none; it may start), changing nothing; and the reservation of
    the pool's nodes it would run past, if any, with where it fits beside it."""
    kept = _nodes_kept(plan, pools, pool, task, seconds)
    if kept is not None and kept.placed is None:
        return (queue_policy.nodes_scope(pool), kept.reservation), kept
    return plan.blocking(scopes, need, seconds), kept


def _backfill_verdict(
    plan: queue_policy.Backfill,
    pools: Pools,
    task: TaskRun,
    placed: tuple[str, Pool | None, str],
    seconds: float | None,
    known: bool,
) -> Verdict:
    """What the walk would do now with a task it has not read (`placed`: `_place`'s answer for it; `seconds`: its
    declared run time, when `known`), changing nothing (apps/jobs/queue_scan.py, `BackfillQueue`). A refused task may
    reserve its first pool (nodes, else total) and its quota where those are not reserved yet; one that fits now is
    held back by the first reservation it would delay (`_held_back`, as `_beside_reservations` asks it)."""
    reason, pool, short_of = placed
    project = task.run.project
    quota = queue_policy.quota_scope(project.pk)
    if pool is None:
        creates = set()
        if short_of == "room" and (first := pools.of(project)):
            _free, capacity = pools.free(first[0])
            if capacity is not None and queue_policy.by_node(capacity.nodes):
                creates.add(queue_policy.nodes_scope(first[0]))
            creates.add(first[0].runtime)
        if short_of and getattr(project, "quota", None) is not None:
            creates.add(quota)
        return Verdict(reason, False, creates=frozenset(creates - plan.reserved.keys()))
    if not known:
        return Verdict("", True)  # how long it runs decides whether it may start: the walk reads it
    scopes = [pool.runtime, quota]
    held, _kept = _held_back(plan, pools, pool, task, task_demand(task.resources, task.replicas), scopes, seconds)
    if held is None:
        return Verdict("", True)
    scope, holder = held
    order = [queue_policy.nodes_scope(pool), *scopes]
    return Verdict(holder.waiting, False, before=frozenset(order[: order.index(scope)]))


def _spans_nodes(task: TaskRun, pools: Pools, pool: Pool) -> bool:
    """Whether the task's replicas need more than one node of the pool (where it reports its nodes)."""
    _free, capacity = pools.free(pool)
    if capacity is None or not capacity.nodes:
        return False
    largest = max(room.total.gpu for room in capacity.nodes)
    replica = Resources.from_json(task.resources)
    return task.replicas > 1 or replica.gpu > largest


class _Timeouts:
    """The declared timeout of a waiting task (its node's, else its template's; None: none), for backfill: the
    templates' are read once per pass, when first needed."""

    def __init__(self, waiting: list[TaskRun]) -> None:
        self.waiting = waiting
        self.templates: dict[int, int | None] = {}
        self.looked: set[int] = set()

    def of(self, task: TaskRun) -> float | None:
        node = plan_of(task.run).nodes[task.node]
        if node.get("timeout"):
            return float(node["timeout"])
        template_id = node.get("template_id")
        if template_id is None:
            return None
        if template_id not in self.looked:
            # Those of the tasks read first, at once; a later chunk's task of another template, its own.
            ids = {plan_of(t.run).nodes[t.node].get("template_id") for t in self.waiting} | {template_id}
            ids -= self.looked | {None}
            self.templates.update(JobTemplate.objects.filter(pk__in=ids).values_list("pk", "timeout"))
            self.looked |= ids
        timeout = self.templates.get(template_id)
        return float(timeout) if timeout else None


def _over_counts(task: TaskRun, tasks_of, in_flight, per_run) -> str:
    """Why the task waits for its pipeline's parallelism or its project's concurrent runs or tasks ("" when it does
    not); what it asks for is `admit`'s business."""
    run = task.run
    parallelism = plan_of(run).parallelism
    if parallelism and per_run[run.pk] >= parallelism:
        return f"waiting for a slot — pipeline parallelism {per_run[run.pk]}/{parallelism} in use"
    quota = getattr(run.project, "quota", None)
    if quota is not None:
        runs = in_flight[run.project_id]
        if quota.concurrent_runs is not None and run.pk not in runs and len(runs) >= quota.concurrent_runs:
            return f"waiting for its run to start — quota {len(runs)}/{quota.concurrent_runs} concurrent runs in flight"
        tasks = tasks_of[run.project_id]
        if quota.concurrent_tasks is not None and tasks + 1 > quota.concurrent_tasks:
            return f"waiting for a slot — quota {tasks}/{quota.concurrent_tasks} concurrent tasks in use"
    return ""


def _upstream_outputs(tasks: list[TaskRun], known: dict[tuple[int, str], str]) -> dict[tuple[int, str], str]:
    """(run id, node) → output directory of the newest attempt, for every upstream of `tasks`; those in `known`
    (loaded by the advance that made the tasks ready, in this transaction) are not looked up again."""
    outputs: dict[tuple[int, str], str] = {}
    wanted = Q()
    for task in tasks:
        missing = []
        for dep in plan_of(task.run).nodes[task.node].get("depends_on", []):
            if (task.run_id, dep) in known:
                outputs[(task.run_id, dep)] = known[(task.run_id, dep)]
            else:
                missing.append(dep)
        if missing:
            wanted |= Q(run_id=task.run_id, node__in=missing)
    if wanted:
        rows = TaskRun.objects.filter(wanted).order_by("attempt").values_list("run_id", "node", "output_dir")
        outputs.update({(run_id, node): out for run_id, node, out in rows})  # the last attempt wins
    return outputs


TOKEN_PLACEHOLDER = "<issued when the task starts>"


def _task_env(
    task: TaskRun,
    node: dict[str, Any],
    template: JobTemplate,
    out: Path,
    outputs: dict[tuple[int, str], str],
    *,
    issue_token: bool = True,
    pool: Pool | None = None,
) -> dict[str, str]:
    """The env contract of a task attempt. `issue_token=False` (a dry run) shows a placeholder for the token.
    On a cluster (`pool`), the portal's URLs are the cluster-facing ones, and the code is the image's own.

    Secrets stay references (`${secret:NAME}`, apps/projects/secrets.py): the values are filled in where the task
    starts, so none is stored with the workload. LookupError (the task fails to start, saying why) when a
    referenced secret was deleted after the run started."""
    from apps.accounts.services import new_task_token
    from apps.projects.secrets import arg_env_name, check_env_references, ref

    run = task.run
    env = {str(k): str(v) for k, v in plan_of(run).env.items()}
    env.update({str(k): str(v) for k, v in (node.get("env") or {}).items()})
    env = {**{str(k): str(v) for k, v in (template.env or {}).items()}, **env}
    properties = (template.args_schema or {}).get("properties", {})
    for arg, value in (node.get("args") or {}).items():
        if value and isinstance(value, str) and properties.get(arg, {}).get("x-portal-type") == "secret":
            env[arg_env_name(arg)] = ref(value)
    if issue_token:
        check_env_references(run.project, env)
    inputs = {env_name(dep): outputs[(run.pk, dep)] for dep in node.get("depends_on", []) if outputs.get((run.pk, dep))}
    owner = run.created_by or run.project.created_by
    on_cluster = bool(pool and pool.cluster)
    site = site_url(on_cluster)  # a pod never gets this host's loopback URL (the dry run warns)
    token_env = {}
    if owner is not None:
        # Limited to the project; saved with the others of this dispatch; revoked when the attempt ends. The env
        # holds a sealed reference, never the token: the process gets the value where it starts (portal/lib/sealed.py).
        raw = TOKEN_PLACEHOLDER
        if issue_token:
            task.api_token, raw = new_task_token(
                owner, name=f"run {run.pk} task {task.node}#{task.attempt}", project=run.project, days=TASK_TOKEN_DAYS
            )
        # The same token serves the portal API and the MLflow-compatible tracking API (the official client
        # sends MLFLOW_TRACKING_TOKEN as a bearer token); experiments land in the run's project.
        token_env = {"PORTAL_API_TOKEN": raw, "MLFLOW_TRACKING_TOKEN": raw}
        if site:
            token_env["MLFLOW_TRACKING_URI"] = site
    where = {"PORTAL_API_URL": site + "/api/v1/"} if site else {}
    # Locally the built-in tasks import the portal's code from this checkout; a pod has the image's (PYTHONPATH=/app).
    code = {} if on_cluster else {"PYTHONPATH": str(settings.BASE_DIR)}
    return {
        "MLFLOW_EXPERIMENT_NAME": run.pipeline_name,  # a node's or the pipeline's env may name another
        **env,
        **inputs,
        **token_env,
        "PORTAL_PROJECT": run.project.slug,
        "PORTAL_PIPELINE": run.pipeline_name,
        "PORTAL_RUN_ID": str(run.pk),
        "PORTAL_TASK": task.node,
        "PORTAL_TASK_ATTEMPT": str(task.attempt),
        "PORTAL_OUTPUT_DIR": str(out),
        **where,
        **code,
    }


TRAIN_PYTHON = "{python:train}"


def task_image(template: JobTemplate) -> str:
    """The image a template's tasks run in: "{portal}" is the portal's own image (PORTAL_IMAGE), which holds
    the built-in tasks (apps/jobs/builtin_tasks) — on a cluster they need the portal's code. A template whose
    command runs the "train" task environment gets the portal's training image instead (PORTAL_TRAIN_IMAGE: the
    Dockerfile's `train` target, with requirements-train.txt and Java for Spark)."""
    portal = settings.PORTAL_TRAIN_IMAGE if TRAIN_PYTHON in (template.command or []) else settings.PORTAL_IMAGE
    return template.image.replace("{portal}", portal)


def registry_images(project_ids: set[int], names: set[str]) -> dict[tuple[int | None, str], Image]:
    """Images with registry credentials, by (project id or None for built-in, name)."""
    if not names:
        return {}
    rows = Image.objects.filter(name__in=names, registry_username__gt="").filter(
        Q(project_id__in=project_ids) | Q(project__isnull=True)
    )
    return {(image.project_id, image.name): image for image in rows}


def build_workload(
    task: TaskRun,
    node: dict[str, Any],
    template: JobTemplate,
    *,
    env: dict[str, str],
    args: dict[str, Any],
    out: Path,
    pool: Pool | None = None,
    image: Image | None = None,
) -> Workload:
    """The neutral workload of a task attempt (no side effects: `pipeline_manifests` calls it for a dry run)."""
    run = task.run
    timeout = node.get("timeout") or template.timeout
    labels = {
        "task_run": str(task.pk),
        "run": str(run.pk),
        "project": run.project.slug,
        "pipeline": run.pipeline_name,
        "node": task.node,
        "attempt": str(task.attempt),
    }
    if image is not None:
        labels["image"] = str(image.pk)
    # The frozen node holds its strategy merged with the template's (dag.node_strategy); Horovod launches through MPI.
    strategy = node.get("strategy") or {}
    replicas = {k: int(v) for k, v in (template.replicas or {}).items()}
    return Workload(
        uid=f"task-{task.pk}",
        name=f"{run.project.slug}-{run.pipeline_name}-{run.number}-{task.node}-{task.attempt}",
        project=run.project.slug,
        command=[*template.command, *to_cli_args(template.args_schema, args)],
        kind=template.kind,
        framework=strategies.launch_framework(template.framework, strategy),
        image=task_image(template),
        env=env,
        workdir=str(out),
        replicas=strategies.launch_replicas(template.framework, replicas, strategy),
        strategy=strategy,
        resources=Resources.from_json(node.get("resources")),
        timeout=int(timeout) if timeout else None,
        retries=0,  # the orchestrator retries (with backoff and a new attempt row), never the runtime
        labels=labels,
        cluster=pool.cluster if pool else "",
        namespace=pool.namespace if pool else "",
        image_pull_secrets=[registry_secret_name(image.pk)] if image is not None else [],
        priority=run.priority,  # its PriorityClass on a cluster that has them (apps/runtime/priority.py)
    )


def _workload(
    task: TaskRun,
    pool: Pool,
    outputs: dict[tuple[int, str], str],
    templates: dict[int, JobTemplate],
    images: dict[tuple[int | None, str], Image],
) -> Workload:
    run = task.run
    node = plan_of(run).nodes[task.node]
    template = templates[node["template_id"]]
    out = output_dir(task)
    out.mkdir(parents=True, exist_ok=True)
    task.output_dir = str(out)
    image = images.get((template.project_id, template.image)) or images.get((None, template.image))
    env = _task_env(task, node, template, out, outputs, pool=pool)
    workload = build_workload(
        task,
        node,
        template,
        env=env,
        args=local_args(task, node),
        out=out,
        pool=pool,
        image=image if pool.cluster else None,
    )
    if kept_off := getattr(task, "kept_off", None):
        # Kept off the nodes reserved for a task ahead of it in the queue, as it will still run when that one starts.
        workload.avoid_nodes = kept_off
    if template.framework == sparkui.FRAMEWORK and pool.runtime == "local":
        # Its Spark UI on a free port of this machine's loopback, reached through the portal (apps/jobs/sparkui.py).
        workload = sparkui.open_ui(task, workload, free_port())
    return workload


def _submit(chosen: list[tuple[TaskRun, Pool]], now, known_outputs: dict[tuple[int, str], str]) -> None:
    """Hand the chosen tasks to their runtimes: a handful of statements however many there are (a fan-out of
    200 nodes becomes ready at once)."""
    from apps.accounts.models import ApiToken

    tasks = [task for task, _pool in chosen]
    template_ids = {plan_of(t.run).nodes[t.node]["template_id"] for t in tasks}
    templates = JobTemplate.objects.in_bulk(template_ids)
    on_clusters = any(pool.cluster for _task, pool in chosen)
    images = (
        registry_images({t.run.project_id for t in tasks}, {t.image for t in templates.values()}) if on_clusters else {}
    )
    outputs = _upstream_outputs(tasks, known_outputs)
    by_runtime: dict[str, list[tuple[TaskRun, Workload]]] = defaultdict(list)
    for task, pool in chosen:
        # A savepoint where building the workload writes (the lineage of pinned datasets), so that what was written
        # for a task that cannot start goes too; two statements per task saved where nothing is written.
        writes = bool(plan_of(task.run).nodes[task.node].get("datasets"))
        try:
            with transaction.atomic() if writes else contextlib.nullcontext():
                by_runtime[pool.runtime].append((task, _workload(task, pool, outputs, templates, images)))
        except (LookupError, OSError) as exc:  # e.g. its dataset version was deleted, or cannot be copied
            _fail_unstartable(task, now, f"could not start: {exc}")
    tasks = [task for group in by_runtime.values() for task, _built in group]
    if not tasks:
        return
    ApiToken.objects.bulk_create([t.api_token for t in tasks if t.api_token is not None])
    for task in tasks:
        if task.api_token is not None:
            task.api_token_id = task.api_token.pk
    for runtime_name, group in by_runtime.items():
        handles = get_runtime(runtime_name).submit_many([built for _task, built in group])
        for (task, built), handle in zip(group, handles, strict=True):
            task.handle, task.runtime = handle, runtime_name
            task.status, task.queued_at, task.waiting_reason = TaskStatus.QUEUED, now, ""
            task.ends_by = now + timedelta(seconds=built.timeout) if built.timeout else None
    fields = ["handle", "runtime", "status", "queued_at", "waiting_reason", "output_dir", "api_token", "ends_by"]
    fields += ["borrowed"] if any(t.borrowed for t in tasks) else []
    if len(tasks) == 1:  # the common case; bulk_update's CASE expressions cost more than they save here
        tasks[0].save(update_fields=fields)
    else:
        TaskRun.objects.bulk_update(tasks, fields, batch_size=200)


def _fail_unstartable(task: TaskRun, now, reason: str) -> None:
    from apps.jobs.tasks import advance_run

    task.status, task.reason, task.waiting_reason, task.finished_at = TaskStatus.FAILED, reason, "", now
    task.api_token = None
    found = diagnose(Facts(reason=reason))  # it never ran: its reason is all there is
    task.failure_cause, task.failure_detail = found.cause, found.detail
    fields = ["status", "reason", "waiting_reason", "finished_at", "api_token", "failure_cause", "failure_detail"]
    task.save(update_fields=fields)
    run_id = task.run_id
    transaction.on_commit(lambda: advance_run.delay(run_id))  # retry or fail the run as for any failure


def revoke_task_tokens(token_ids: list[int]) -> None:
    from apps.accounts.models import ApiToken

    if token_ids:
        ApiToken.objects.filter(pk__in=token_ids, revoked_at__isnull=True).update(revoked_at=timezone.now())


def revoke_tokens_of_ended_tasks() -> int:
    """Revoke tokens whose attempt has ended but which are still valid (an advance that crashed between
    recording the end and revoking). Returns how many."""
    from apps.accounts.models import ApiToken

    ended = TaskRun.objects.filter(api_token__isnull=False).exclude(status__in=TASK_ACTIVE | {TaskStatus.WAITING})
    return ApiToken.objects.filter(revoked_at__isnull=True, pk__in=ended.values("api_token_id")).update(
        revoked_at=timezone.now()
    )
