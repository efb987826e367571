"""The orchestrator: moves pipeline runs forward. Level-triggered and idempotent — every entry point
looks at the database and the runtime and does what is missing, so running it twice, late or after a
crash is safe.

- `advance_run(run_id)`: sync the run's active tasks from the runtime, retry or fail them, create
  tasks for nodes whose upstreams are done (or skip / cache / mark upstream-failed), finish the run.
- `dispatch()`: hand waiting tasks to the runtime in priority order while quotas, capacity and
  pipeline parallelism allow; the ones that wait say why.
- `reconcile()`: the periodic repair (dead agents, lost events, due retries).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.db import transaction
from django.utils import timezone

from apps.datasets.models import DatasetUsage, Direction
from apps.jobs.diagnosis import diagnose_task
from apps.jobs.dispatcher import RUN_RELATED, dispatch, revoke_task_tokens, revoke_tokens_of_ended_tasks
from apps.jobs.logs import run_log_group
from apps.jobs.models import (
    TASK_ACTIVE,
    TASK_DONE_OK,
    TASK_FINISHED,
    PipelineRun,
    RunStatus,
    TaskRun,
    TaskStatus,
)
from apps.jobs.runstate import (
    RunPlan,
    declared_timeout,
    forget_node_states,
    locked_node_states,
    node_states,
    node_status,
    plan_of,
    status_payload,
)
from apps.runtime.base import get_runtime
from apps.runtime.workload import Phase, Status
from portal.lib.publish import publish

log = logging.getLogger("portal.orchestrator")

PHASE_TO_STATUS = {
    Phase.PENDING: TaskStatus.QUEUED,
    Phase.RUNNING: TaskStatus.RUNNING,
    Phase.SUCCEEDED: TaskStatus.SUCCEEDED,
    Phase.FAILED: TaskStatus.FAILED,
    Phase.CANCELLED: TaskStatus.CANCELLED,
    Phase.LOST: TaskStatus.FAILED,
}
FAILED_UPSTREAM = {TaskStatus.FAILED, TaskStatus.CANCELLED, TaskStatus.UPSTREAM_FAILED}


# --- helpers ------------------------------------------------------------------------------------


def digest_dir(path: str) -> str:
    """Content digest of a directory: relative paths and the SHA-256 of every file, in order."""
    if not path:  # no output directory (never handed to a runtime): not the current one
        return ""
    outer = hashlib.sha256()
    root = Path(path)
    if not root.is_dir():
        return ""
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        inner = hashlib.sha256()
        with file.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                inner.update(chunk)
        outer.update(f"{file.relative_to(root).as_posix()}\0{inner.hexdigest()}\n".encode())
    return outer.hexdigest()


def latest_tasks(run: PipelineRun) -> dict[str, TaskRun]:
    """The newest attempt of each node, as full rows (pages; the orchestrator reads `node_states`)."""
    latest: dict[str, TaskRun] = {}
    for task in run.tasks.select_related("cached_from__run").order_by("node", "attempt"):
        latest[task.node] = task
    return latest


def cache_key(node: dict[str, Any], upstream: dict[str, TaskRun]) -> str:
    payload = {
        "template": node["template"],
        "args": node["args"],
        "env": node.get("env", {}),
        "inputs": {name: task.output_digest for name, task in sorted(upstream.items())},
        "datasets": {arg: pinned["digest"] for arg, pinned in sorted((node.get("datasets") or {}).items())},
    }
    if node.get("strategy"):  # precision or accumulation change what is trained; only where there is one
        payload["strategy"] = node["strategy"]
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def run_status_snapshot(run_id: int) -> dict[str, Any] | None:
    """The run's whole state as a status event (sent to a websocket when it connects)."""
    run = PipelineRun.objects.filter(pk=run_id).first()
    return status_payload(run, plan_of(run), node_states(run.pk)) if run is not None else None


def publish_status(run: PipelineRun, tasks: dict[str, TaskRun], changed: Iterable[str] | None = None) -> None:
    """Live node colours and progress for the run page (same group as the run's log lines): the run's
    status and progress and the nodes in `changed` (all of them when None)."""
    publish_payload(run.pk, status_payload(run, plan_of(run), tasks, only=changed))


def publish_nodes(run_id: int, tasks: dict[str, TaskRun]) -> None:
    """Only these nodes' states, for the run page: a start or a dispatch changes neither the run's status nor
    its progress."""
    nodes = {name: node_status(task) for name, task in tasks.items()}
    publish_payload(run_id, {"type": "run.status", "run": run_id, "nodes": nodes})


def publish_payload(run_id: int, payload: dict[str, Any]) -> None:
    try:
        publish(run_log_group(run_id), payload)
    except Exception:  # status is also in the database; the page gets a snapshot when it (re)connects
        log.warning("could not publish status of run %s", run_id, exc_info=True)


# --- advancing a run -------------------------------------------------------------------------------


def _apply_phase(task: TaskRun, status: Status, node: dict[str, Any], now, ended: list[int]) -> TaskRun | None:
    """Record what the runtime says about an active task; returns the retry attempt it creates, if any."""
    new = PHASE_TO_STATUS[status.phase]
    if new == task.status:
        return None
    task.status = new
    if new == TaskStatus.RUNNING:
        task.started_at = task.started_at or now
        task.save(update_fields=["status", "started_at"])
        return None
    task.exit_code = status.exit_code
    task.reason = status.reason if status.phase != Phase.LOST else "agent lost: the process supervising it died"
    preempted = new == TaskStatus.CANCELLED and task.preempted_at is not None
    if preempted:
        task.reason = PREEMPTED
    task.finished_at = now
    fields = ["status", "exit_code", "reason", "finished_at", "started_at"]  # no deferred field: none is read back
    if status.usage:
        task.usage = status.usage
        fields.append("usage")
    if task.started_at is None:  # a task that ended before its start was recorded (the agent skips that notice)
        wall = (status.usage or {}).get("wall_seconds")
        task.started_at = now - timedelta(seconds=float(wall)) if wall else now
    if new == TaskStatus.SUCCEEDED:
        task.output_digest = digest_dir(task.output_dir)
        fields.append("output_digest")
    elif new == TaskStatus.FAILED:  # its log's last lines and its samples are stored before its end is reported
        found = diagnose_task(task, task.exit_code, task.reason, status.usage)
        task.failure_cause, task.failure_detail = found.cause, found.detail
        fields += ["failure_cause", "failure_detail"]
    task.save(update_fields=fields)
    if task.api_token_id:
        ended.append(task.api_token_id)  # revoked in the same transaction
    if preempted and task.run.status != RunStatus.CANCELLING:
        return _requeue(task, now)
    retries = int(node.get("retries", 0))
    if new != TaskStatus.FAILED or task.run.status == RunStatus.CANCELLING:
        return None
    failures = _failures(task)
    if failures <= retries:
        backoff = float(node.get("retry_backoff", 10)) * (2 ** (failures - 1))
        reason = f"retry {failures}/{retries} after {backoff:g} s backoff ({task.reason})"
        return _next_attempt(task, now, backoff, reason)
    return None


def _failures(task: TaskRun) -> int:
    """How many attempts of the task's node have failed, this one included: the node's retries count failures, not
    attempts (an attempt preempted for a project under its quota was requeued, not failed)."""
    if task.attempt == 1:
        return 1
    return TaskRun.objects.filter(run_id=task.run_id, node=task.node, status=TaskStatus.FAILED).count()


def _next_attempt(task: TaskRun, now, backoff: float, reason: str, **fields) -> TaskRun:
    """The task's next attempt, waiting `backoff` seconds (the run advanced again then) with `reason` shown."""
    from apps.jobs.tasks import advance_run

    run_id = task.run_id
    transaction.on_commit(lambda: advance_run.apply_async((run_id,), countdown=backoff))
    return TaskRun.objects.create(
        run=task.run,
        node=task.node,
        attempt=task.attempt + 1,
        status=TaskStatus.WAITING,
        resources=task.resources,
        replicas=task.replicas,
        timeout=declared_timeout(plan_of(task.run).nodes[task.node]),
        cache_key=task.cache_key,
        not_before=now + timedelta(seconds=backoff),
        waiting_reason=reason,
        **fields,
    )


PREEMPTED = "preempted: it ran on room above its project's quota, which a project under its quota needed"


# How long a preempted task waits before the queue tries it again (seconds). Without it, a task preempted for a claimant
# that still cannot start (its room went to work the runtime held pending, or it is not on one node) could borrow the
# room back in the next pass and be preempted again, with no time passing between the two.
REQUEUE_BACKOFF = 300


def _requeue(task: TaskRun, now) -> TaskRun:
    """The next attempt of a preempted task, waiting again in its old place (its first attempt's age: the queue's
    order and aging count from it, so that being preempted does not send it to the back) after REQUEUE_BACKOFF."""
    return _next_attempt(task, now, REQUEUE_BACKOFF, "requeued after preemption", created_at=task.created_at)


def _sync_active(
    run: PipelineRun,
    plan: RunPlan,
    tasks: dict[str, TaskRun],
    now,
    ended: list[int],
    only: set[int] | None,
    reports: dict[int, dict | None] | None,
) -> set[str]:
    """Apply the runtime's view of the run's active tasks (those in `only`, or all): the records the events
    carried (`reports`, by TaskRun id; None: not carried), and one poll for the others."""
    changed: set[str] = set()
    reports = reports or {}
    active = [t for t in tasks.values() if t.status in TASK_ACTIVE and (only is None or t.pk in only)]
    statuses: dict[int, Status] = {}
    by_runtime: dict[str, list[TaskRun]] = defaultdict(list)
    for task in active:
        task.run = run
        report = reports.get(task.pk)
        if report is not None:
            statuses[task.pk] = Status(**{**report, "phase": Phase(report["phase"])})
        else:
            by_runtime[task.runtime].append(task)
    for runtime_name, group in by_runtime.items():
        polled = get_runtime(runtime_name).poll_many([t.handle for t in group])
        statuses.update({t.pk: polled[t.handle] for t in group})
    for task in active:
        before = task.status
        retry = _apply_phase(task, statuses[task.pk], plan.nodes[task.node], now, ended)
        if retry is not None:
            tasks[task.node] = retry
        if task.status != before:
            changed.add(task.node)
    return changed


def advance_run(run_id: int, task_id: int | None = None, reported: dict | None = None) -> PipelineRun | None:
    """Move one run forward; safe to call any number of times.

    `task_id`: the attempt whose change triggered this (a runtime event): only it is polled, so 200 leaves
    of a fan-out finishing cost 200 polls, not 200². Without it (reconcile, start, cancel) every active
    attempt of the run is polled. `reported`: the runtime's record of that attempt (a `Status` as a dict)
    when the event carried it, so not even that poll is needed.
    """
    only = {task_id} if task_id is not None else None
    reports = {task_id: reported} if task_id is not None and reported is not None else None
    run = _advance(run_id, only, reports, wait=True)
    assert run is not BUSY  # only a caller that does not wait is told the run is busy
    return run


def advance_reported(run_id: int, reports: dict[int, dict | None]) -> bool:
    """Apply the runtime's records of ended attempts of one run (`Status`es as dicts or None, by TaskRun id; several
    at once when they end together, as a fan-out's leaves do) and dispatch what became ready, without waiting
    for anyone: False when another process is advancing the run, and the caller hands the reports to a worker
    instead. The local agent advances runs this way, on its notifier thread, which must never stall."""
    return _advance(run_id, set(reports), reports, wait=False) is not BUSY


BUSY = object()  # what `_advance` returns to a caller that does not wait when the run is locked


def _advance(run_id: int, only: set[int] | None, reports: dict[int, dict | None] | None, *, wait: bool):
    """The advance and the dispatch it enables, in one transaction: one commit (a WAL flush) per event."""
    ended: list[int] = []  # tokens of attempts that ended
    with transaction.atomic():
        # FOR NO KEY UPDATE: the advance never changes the run's key, so rows that refer to the run (a tracking
        # run its task creates, a dataset version it publishes) may be written meanwhile. FOR UPDATE also blocked
        # their foreign-key checks (FOR KEY SHARE) until this commit, and deadlocked a task's runs/create
        # against advances of its run (seen under load on PostgreSQL).
        run = (
            PipelineRun.objects.select_for_update(of=("self",), skip_locked=not wait, no_key=True)
            .select_related(*RUN_RELATED)  # the dispatch in this transaction needs them
            .defer("spec")  # the plan cache has it
            .filter(pk=run_id)
            .first()
        )
        if run is None:  # gone, or (not waiting) locked by another advance
            return BUSY if not wait and PipelineRun.objects.filter(pk=run_id).exists() else None
        if run.is_finished:
            return run
        plan = plan_of(run)
        now = timezone.now()
        tasks = locked_node_states(run)
        changed = _sync_active(run, plan, tasks, now, ended, only, reports)

        if run.status == RunStatus.CANCELLING:
            changed |= _cancel_tasks(run, plan, tasks, now, "cancelled")
        else:
            failed = [t for t in tasks.values() if t.status == TaskStatus.FAILED]
            if failed and plan.fail_fast:
                changed |= _cancel_tasks(run, plan, tasks, now, f"fail-fast: {failed[0].node} failed")
            changed |= _create_ready_tasks(run, plan, tasks, now)

        run_before = (run.status, run.reason)
        _finish_if_done(run, plan, tasks, now)
        if run.is_finished:
            forget_node_states(run)
        # In this transaction when the queue is free: the tasks just created are visible to it, and the upstream
        # outputs it passes on are the ones loaded here. The queue's lock is only tried (never waited for while
        # holding the run's), so two advances cannot wait for each other.
        outputs = {(run.pk, name): task.output_dir for name, task in tasks.items() if task.status in TASK_FINISHED}
        try:  # dispatch() is a savepoint here: when it fails, what the advance recorded is kept
            dispatched = dispatch(wait=False, known_runs={run.pk: run}, known_outputs=outputs)
        except Exception:
            log.exception("dispatching after advancing run %s failed; trying again on its own", run.pk)
            dispatched = None
        # With the end recorded (atomic with it); reconcile sweeps up after a crash all the same.
        revoke_task_tokens(ended)
    if dispatched is None:  # another dispatch pass holds the queue and may have missed the tasks created here
        if wait:
            dispatched = dispatch()
        else:
            from apps.jobs import tasks as celery_tasks

            dispatched = {}
            transaction.on_commit(celery_tasks.dispatch_waiting.delay)  # the caller's, when it has one
    for node, task in dispatched.get(run.pk, {}).items():
        tasks[node] = task
        changed.add(node)
    if changed or (run.status, run.reason) != run_before:
        transaction.on_commit(lambda: publish_status(run, tasks, changed))
    return run


def dispatch_waiting() -> None:
    """A dispatch pass of its own, for an advance that found the queue busy and must not wait for it; the run
    pages hear of the tasks it queued."""
    for run_id, nodes in dispatch().items():
        publish_nodes(run_id, nodes)


def _cancel_tasks(run: PipelineRun, plan: RunPlan, tasks: dict[str, TaskRun], now, reason: str) -> set[str]:
    changed: set[str] = set()
    for task in tasks.values():
        if task.status in TASK_ACTIVE:
            task = TaskRun.objects.get(pk=task.pk)
            get_runtime(task.runtime).cancel(task.handle)
        elif task.status == TaskStatus.WAITING:
            task.status, task.reason, task.finished_at, task.waiting_reason = TaskStatus.CANCELLED, reason, now, ""
            task.save(update_fields=["status", "reason", "finished_at", "waiting_reason"])
            changed.add(task.node)
    missing = [
        TaskRun(run=run, node=name, status=TaskStatus.CANCELLED, reason=reason, finished_at=now, created_at=now)
        for name in plan.order
        if name not in tasks
    ]
    for task in TaskRun.objects.bulk_create(missing):
        tasks[task.node] = task
        changed.add(task.node)
    return changed


def _create_ready_tasks(run: PipelineRun, plan: RunPlan, tasks: dict[str, TaskRun], now) -> set[str]:
    created: set[str] = set()
    digests: dict[str, TaskRun] = {}  # upstream rows with their output digests, loaded when needed
    for name in plan.order:
        if name in tasks:
            continue
        node = plan.nodes[name]
        deps = node.get("depends_on", [])
        if any(dep not in tasks or tasks[dep].status not in TASK_FINISHED for dep in deps):
            continue
        bad = [dep for dep in deps if tasks[dep].status in FAILED_UPSTREAM]
        replicas = int(node.get("replicas", 1))  # frozen from its template (services._freeze)
        task = TaskRun(
            run=run,
            node=name,
            resources=node.get("resources", {}),
            replicas=replicas,
            timeout=declared_timeout(node),
            created_at=now,
        )
        if bad:
            task.status, task.reason, task.finished_at = TaskStatus.UPSTREAM_FAILED, f"upstream {bad[0]} failed", now
        elif node.get("skip"):
            task.status, task.reason, task.finished_at = TaskStatus.SKIPPED, "skipped", now
        else:
            for dep in deps:  # rows this advance loaded in full already know their digest
                if dep not in digests and "output_digest" not in tasks[dep].get_deferred_fields():
                    digests[dep] = tasks[dep]
            missing = [tasks[dep].pk for dep in deps if dep not in digests]
            if missing:
                for row in TaskRun.objects.filter(pk__in=missing).only("id", "node", "output_digest"):
                    digests[row.node] = row
            task.cache_key = cache_key(node, {dep: digests[dep] for dep in deps})
            hit = _cache_hit(run, task.cache_key) if node.get("cache", True) else None
            if hit is not None:
                task.status, task.cached_from = TaskStatus.CACHED, hit
                task.output_dir, task.output_digest = hit.output_dir, hit.output_digest
                task.reason = f"cached: same inputs as {hit.run} / {hit.node}"
                task.started_at = task.finished_at = now
            else:
                task.status, task.waiting_reason = TaskStatus.WAITING, "waiting for the scheduler"
        tasks[name] = digests[name] = task
        created.add(name)
    TaskRun.objects.bulk_create([tasks[name] for name in plan.order if name in created])
    _record_cached_reads(run, [tasks[name] for name in created if tasks[name].status == TaskStatus.CACHED])
    return created


def _record_cached_reads(run: PipelineRun, cached: list[TaskRun]) -> None:
    """A node taken from the cache read what the task it was taken from read (same cache key: same dataset
    versions): record those reads for it, or lineage (dataset → run → tracked run → model) would miss this run."""
    if not cached:
        return
    by_source = {task.cached_from_id: task for task in cached}
    reads = DatasetUsage.objects.filter(task_run_id__in=by_source, direction=Direction.READ)
    DatasetUsage.objects.bulk_create(
        DatasetUsage(version_id=version_id, task_run=by_source[source_id], pipeline_run=run, direction=Direction.READ)
        for source_id, version_id in reads.values_list("task_run_id", "version_id").distinct()
    )


def _cache_hit(run: PipelineRun, key: str) -> TaskRun | None:
    for candidate in (
        TaskRun.objects.filter(run__project_id=run.project_id, cache_key=key, status=TaskStatus.SUCCEEDED)
        .exclude(output_digest="")
        .select_related("run")
        .order_by("-finished_at")[:5]
    ):
        if Path(candidate.output_dir).is_dir() and digest_dir(candidate.output_dir) == candidate.output_digest:
            return candidate
    return None


# Called with each run that ended, after the commit that ended it: how a higher app follows runs without this one
# importing it (apps/hpo kicks the study whose trial it was). A listener must be quick and must not raise.
_run_finished: list[Callable[[PipelineRun], None]] = []


def on_run_finished(listener: Callable[[PipelineRun], None]) -> None:
    if listener not in _run_finished:
        _run_finished.append(listener)


def _notify_finished(run: PipelineRun) -> None:
    for listener in _run_finished:
        try:
            listener(run)
        except Exception:
            log.exception("run-finished listener %s failed for run %s", listener, run.pk)


def _finish_if_done(run: PipelineRun, plan: RunPlan, tasks: dict[str, TaskRun], now) -> None:
    started = any(t.status != TaskStatus.WAITING for t in tasks.values())
    if started and run.status == RunStatus.QUEUED:
        run.status, run.started_at = RunStatus.RUNNING, run.started_at or now
        run.save(update_fields=["status", "started_at"])
    if len(tasks) < len(plan.nodes) or any(t.status not in TASK_FINISHED for t in tasks.values()):
        return
    if run.status == RunStatus.CANCELLING:
        run.status, run.reason = RunStatus.CANCELLED, "cancelled"
    elif all(t.status in TASK_DONE_OK for t in tasks.values()):
        run.status, run.reason = RunStatus.SUCCEEDED, ""
    else:
        full = latest_tasks(run)  # the failure's reason and time (narrow states lack them)
        bad = sorted(
            (t for t in full.values() if t.status not in TASK_DONE_OK), key=lambda t: (t.finished_at or now, t.pk)
        )
        first = next((t for t in bad if t.status == TaskStatus.FAILED), bad[0])
        run.status, run.reason = RunStatus.FAILED, f"{first.node}: {first.reason or first.status}"
    run.started_at = run.started_at or now
    run.finished_at = now
    run.save(update_fields=["status", "reason", "started_at", "finished_at"])
    if _run_finished:
        transaction.on_commit(lambda: _notify_finished(run))


# --- repair ---------------------------------------------------------------------------------------


def reconcile() -> list[int]:
    """Repair what events missed: lost workloads of dead agents, due retries, runs never advanced."""
    in_use = set(TaskRun.objects.filter(status__in=TASK_ACTIVE).values_list("runtime", flat=True).distinct())
    for name in sorted((in_use - {""}) | {get_runtime().name}):
        get_runtime(name).repair()
    revoke_tokens_of_ended_tasks()
    run_ids = list(
        PipelineRun.objects.filter(status__in=[RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.CANCELLING])
        .values_list("pk", flat=True)
        .order_by("pk")
    )
    for run_id in run_ids:
        try:
            advance_run(run_id)
        except Exception:
            log.exception("reconciling run %s failed", run_id)
    return run_ids
