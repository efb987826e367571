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
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.jobs.args import to_cli_args
from apps.jobs.dag import topological_order
from apps.jobs.models import (
    TASK_ACTIVE,
    TASK_DONE_OK,
    TASK_FINISHED,
    JobTemplate,
    PipelineRun,
    RunStatus,
    TaskRun,
    TaskStatus,
)
from apps.runtime.base import get_runtime
from apps.runtime.workload import Capacity, Phase, Resources, Workload
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


def env_name(node: str) -> str:
    return "PORTAL_INPUT_" + node.upper().replace("-", "_")


def output_dir(task: TaskRun) -> Path:
    run = task.run
    return (
        Path(settings.PORTAL_WORK_DIR) / run.project.slug / f"run-{run.number}" / task.node / f"attempt-{task.attempt}"
    )


def digest_dir(path: str) -> str:
    """Content digest of a directory: relative paths and the SHA-256 of every file, in order."""
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
    """The newest attempt of each node."""
    latest: dict[str, TaskRun] = {}
    for task in run.tasks.order_by("node", "attempt"):
        latest[task.node] = task
    return latest


def template_for(node: dict[str, Any]) -> JobTemplate:
    """The exact template version a frozen node runs (resolved when the run was created)."""
    return JobTemplate.objects.get(pk=node["template_id"])


def cache_key(run: PipelineRun, node: dict[str, Any], upstream: dict[str, TaskRun]) -> str:
    payload = {
        "template": node["template"],
        "args": node["args"],
        "env": node.get("env", {}),
        "inputs": {name: task.output_digest for name, task in sorted(upstream.items())},
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def run_status_snapshot(run_id: int) -> dict[str, Any] | None:
    """The run's state as a status event (sent to a websocket when it connects)."""
    run = PipelineRun.objects.filter(pk=run_id).first()
    return status_payload(run, latest_tasks(run)) if run is not None else None


def publish_status(run: PipelineRun, tasks: dict[str, TaskRun] | None = None) -> None:
    """Live node colours and progress for the run page (same group as the run's log lines)."""
    payload = status_payload(run, latest_tasks(run) if tasks is None else tasks)
    try:
        publish(f"jobs.run.{run.pk}.logs", payload)
    except Exception:  # status is also in the database; the page gets a snapshot when it (re)connects
        log.warning("could not publish status of run %s", run.pk, exc_info=True)


def status_payload(run: PipelineRun, tasks: dict[str, TaskRun]) -> dict[str, Any]:
    nodes = [n["name"] for n in run.spec.get("nodes", [])]
    return {
        "type": "run.status",
        "run": run.pk,
        "status": run.status,
        "reason": run.reason,
        "done": sum(1 for t in tasks.values() if t.status in TASK_FINISHED),
        "total": len(nodes),
        "nodes": {
            name: {
                "status": tasks[name].status if name in tasks else "pending",
                "attempt": tasks[name].attempt if name in tasks else 0,
                "waiting_reason": tasks[name].waiting_reason if name in tasks else "",
                "reason": tasks[name].reason if name in tasks else "",
            }
            for name in nodes
        },
    }


# --- advancing a run -------------------------------------------------------------------------------


def _apply_phase(task: TaskRun, node: dict[str, Any], now) -> TaskRun | None:
    """Record what the runtime says about an active task; returns the retry attempt it creates, if any."""
    status = get_runtime(task.runtime).poll(task.handle)
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
    task.finished_at = now
    task.started_at = task.started_at or now
    if new == TaskStatus.SUCCEEDED:
        task.output_digest = digest_dir(task.output_dir)
    task.save()
    _revoke_task_token(task)
    retries = int(node.get("retries", 0))
    if new == TaskStatus.FAILED and task.attempt <= retries and task.run.status != RunStatus.CANCELLING:
        backoff = float(node.get("retry_backoff", 10)) * (2 ** (task.attempt - 1))
        retry = TaskRun.objects.create(
            run=task.run,
            node=task.node,
            attempt=task.attempt + 1,
            status=TaskStatus.WAITING,
            resources=task.resources,
            cache_key=task.cache_key,
            not_before=now + timedelta(seconds=backoff),
            waiting_reason=f"retry {task.attempt}/{retries} after {backoff:g} s backoff ({task.reason})",
        )
        from apps.jobs.tasks import advance_run

        transaction.on_commit(lambda: advance_run.apply_async((task.run_id,), countdown=backoff))
        return retry
    return None


def advance_run(run_id: int) -> PipelineRun | None:
    """Move one run forward; safe to call any number of times."""
    with transaction.atomic():
        run = PipelineRun.objects.select_for_update().select_related("project").filter(pk=run_id).first()
        if run is None or run.is_finished:
            return run
        now = timezone.now()
        nodes = {n["name"]: n for n in run.spec["nodes"]}
        tasks = latest_tasks(run)

        for name, task in list(tasks.items()):
            if task.status in TASK_ACTIVE:
                retry = _apply_phase(task, nodes[name], now)
                if retry is not None:
                    tasks[name] = retry

        if run.status == RunStatus.CANCELLING:
            _cancel_tasks(run, tasks, now, "cancelled")
        else:
            failed = [t for t in tasks.values() if t.status == TaskStatus.FAILED]
            if failed and run.spec.get("failure_policy", "fail_fast") == "fail_fast":
                _cancel_tasks(run, tasks, now, f"fail-fast: {failed[0].node} failed")
            _create_ready_tasks(run, nodes, tasks, now)

        _finish_if_done(run, nodes, tasks, now)
    if run.pk in dispatch():
        tasks = latest_tasks(run)  # this run's tasks changed state (queued)
    publish_status(run, tasks)
    return run


def _cancel_tasks(run: PipelineRun, tasks: dict[str, TaskRun], now, reason: str) -> None:
    for task in tasks.values():
        if task.status in TASK_ACTIVE:
            get_runtime(task.runtime).cancel(task.handle)
        elif task.status == TaskStatus.WAITING:
            task.status, task.reason, task.finished_at, task.waiting_reason = TaskStatus.CANCELLED, reason, now, ""
            task.save(update_fields=["status", "reason", "finished_at", "waiting_reason"])
    for name in (n["name"] for n in run.spec["nodes"]):
        if name not in tasks:
            tasks[name] = TaskRun.objects.create(
                run=run, node=name, status=TaskStatus.CANCELLED, reason=reason, finished_at=now
            )


def _create_ready_tasks(run: PipelineRun, nodes: dict[str, dict], tasks: dict[str, TaskRun], now) -> None:
    graph = {name: node.get("depends_on", []) for name, node in nodes.items()}
    for name in topological_order(graph):
        if name in tasks:
            continue
        node = nodes[name]
        upstream = {dep: tasks.get(dep) for dep in node.get("depends_on", [])}
        if any(t is None or t.status not in TASK_FINISHED for t in upstream.values()):
            continue
        bad = [dep for dep, t in upstream.items() if t.status in FAILED_UPSTREAM]
        task = TaskRun(run=run, node=name, resources=node.get("resources", {}), created_at=now)
        if bad:
            task.status, task.reason, task.finished_at = TaskStatus.UPSTREAM_FAILED, f"upstream {bad[0]} failed", now
        elif node.get("skip"):
            task.status, task.reason, task.finished_at = TaskStatus.SKIPPED, "skipped", now
        else:
            task.cache_key = cache_key(run, node, upstream)  # type: ignore[arg-type]
            hit = _cache_hit(run, task.cache_key) if node.get("cache", True) else None
            if hit is not None:
                task.status, task.cached_from = TaskStatus.CACHED, hit
                task.output_dir, task.output_digest = hit.output_dir, hit.output_digest
                task.reason = f"cached: same inputs as {hit.run} / {hit.node}"
                task.started_at = task.finished_at = now
            else:
                task.status, task.waiting_reason = TaskStatus.WAITING, "waiting for the scheduler"
        task.save()
        tasks[name] = task


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


def _finish_if_done(run: PipelineRun, nodes: dict[str, dict], tasks: dict[str, TaskRun], now) -> None:
    started = any(t.status not in (TaskStatus.WAITING,) for t in tasks.values())
    if started and run.status == RunStatus.QUEUED:
        run.status, run.started_at = RunStatus.RUNNING, run.started_at or now
        run.save(update_fields=["status", "started_at"])
    if len(tasks) < len(nodes) or any(t.status not in TASK_FINISHED for t in tasks.values()):
        return
    if run.status == RunStatus.CANCELLING:
        run.status, run.reason = RunStatus.CANCELLED, "cancelled"
    elif all(t.status in TASK_DONE_OK for t in tasks.values()):
        run.status, run.reason = RunStatus.SUCCEEDED, ""
    else:
        bad = sorted(
            (t for t in tasks.values() if t.status not in TASK_DONE_OK), key=lambda t: (t.finished_at or now, t.pk)
        )
        first = next((t for t in bad if t.status == TaskStatus.FAILED), bad[0])
        run.status, run.reason = RunStatus.FAILED, f"{first.node}: {first.reason or first.status}"
    run.started_at = run.started_at or now
    run.finished_at = now
    run.save(update_fields=["status", "reason", "started_at", "finished_at"])


# --- dispatching ----------------------------------------------------------------------------------


def _fmt_cpu(v: float) -> str:
    return f"{v:g} CPU core" + ("" if v == 1 else "s")


def _fmt_gpu(v: float) -> str:
    return f"{v:g} GPU" + ("" if v == 1 else "s")


def _fmt_mem(v: float) -> str:
    return f"{v / 2**30:.1f} GiB"


def dispatch() -> set[int]:
    """Submit waiting tasks that fit; tell the others why they wait. Returns the runs that got a task."""
    with transaction.atomic():
        # One dispatcher at a time (a row lock on PostgreSQL; SQLite serialises writers anyway).
        from apps.runtime.models import DispatchLock

        DispatchLock.objects.select_for_update().get_or_create(pk=1)
        now = timezone.now()
        waiting = list(
            TaskRun.objects.filter(status=TaskStatus.WAITING, run__status__in=[RunStatus.QUEUED, RunStatus.RUNNING])
            .select_related("run", "run__project", "run__project__quota", "run__created_by")
            .order_by("-run__priority", "created_at", "pk")
        )
        if not waiting:
            return set()
        runtime = get_runtime()
        capacity = runtime.capacity()
        active = TaskRun.objects.filter(status__in=TASK_ACTIVE).values("run_id", "run__project_id", "resources")
        per_project: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0])
        per_run: dict[int, int] = defaultdict(int)
        for row in active:
            used = per_project[row["run__project_id"]]
            res = row["resources"] or {}
            used[0] += float(res.get("cpu") or 0)
            used[1] += float(res.get("memory") or 0)
            used[2] += float(res.get("gpu") or 0)
            used[3] += 1
            per_run[row["run_id"]] += 1
        free = [capacity.cpu, capacity.memory_bytes, capacity.gpu] if capacity else None
        submitted: set[int] = set()
        for task in waiting:
            if task.not_before and task.not_before > now:
                continue
            reason = _why_wait(task, per_project, per_run, free, capacity)
            if reason:
                if task.waiting_reason != reason:
                    task.waiting_reason = reason
                    task.save(update_fields=["waiting_reason"])
                continue
            _submit(task, runtime, now)
            submitted.add(task.run_id)
            res = task.resources or {}
            need = [float(res.get("cpu") or 0), float(res.get("memory") or 0), float(res.get("gpu") or 0)]
            used = per_project[task.run.project_id]
            for i in range(3):
                used[i] += need[i]
                if free is not None:
                    free[i] -= need[i]
            used[3] += 1
            per_run[task.run_id] += 1
        return submitted


def _why_wait(task: TaskRun, per_project, per_run, free, capacity: Capacity | None) -> str:
    run = task.run
    parallelism = int(run.spec.get("parallelism") or 0)
    if parallelism and per_run[run.pk] >= parallelism:
        return f"waiting for a slot — pipeline parallelism {per_run[run.pk]}/{parallelism} in use"
    res = task.resources or {}
    cpu, mem, gpu = float(res.get("cpu") or 0), float(res.get("memory") or 0), float(res.get("gpu") or 0)
    quota = getattr(run.project, "quota", None)
    used = per_project[run.project_id]
    if quota is not None:
        if quota.concurrent_runs is not None and used[3] + 1 > quota.concurrent_runs:
            return f"waiting for a slot — quota {used[3]:g}/{quota.concurrent_runs} concurrent tasks in use"
        if quota.gpus is not None and gpu and used[2] + gpu > float(quota.gpus):
            return f"waiting for {_fmt_gpu(gpu)} — quota {used[2]:g}/{float(quota.gpus):g} in use"
        if quota.cpu_cores is not None and cpu and used[0] + cpu > float(quota.cpu_cores):
            return f"waiting for {_fmt_cpu(cpu)} — quota {used[0]:g}/{float(quota.cpu_cores):g} in use"
        if quota.memory_bytes is not None and mem and used[1] + mem > quota.memory_bytes:
            in_use = f"{_fmt_mem(used[1])}/{_fmt_mem(quota.memory_bytes)}"
            return f"waiting for {_fmt_mem(mem)} of memory — quota {in_use} in use"
    if capacity is None:
        return "waiting for the runtime — no agent is running (start it with `manage.py runagent`)"
    if gpu and free[2] < gpu:
        return f"waiting for {_fmt_gpu(gpu)} — {max(free[2], 0):g} of {capacity.total_gpu:g} free on this machine"
    if cpu and free[0] < cpu - 1e-9:
        return f"waiting for {_fmt_cpu(cpu)} — {max(free[0], 0):g} of {capacity.total_cpu:g} free on this machine"
    if mem and free[1] < mem:
        return f"waiting for {_fmt_mem(mem)} of memory — {_fmt_mem(max(free[1], 0))} free on this machine"
    return ""


def _task_env(task: TaskRun, node: dict[str, Any], template: JobTemplate, out: Path) -> dict[str, str]:
    from apps.accounts.services import create_token

    run = task.run
    env = {str(k): str(v) for k, v in (run.spec.get("env") or {}).items()}
    env.update({str(k): str(v) for k, v in (node.get("env") or {}).items()})
    env = {**{str(k): str(v) for k, v in (template.env or {}).items()}, **env}
    inputs = {}
    for dep in node.get("depends_on", []):
        upstream = run.tasks.filter(node=dep).order_by("-attempt").first()
        if upstream is not None and upstream.output_dir:
            inputs[env_name(dep)] = upstream.output_dir
    owner = run.created_by or run.project.created_by
    token_env = {}
    if owner is not None:
        # Short-lived and limited to the project; revoked when the attempt ends.
        token, raw = create_token(
            owner, name=f"run {run.pk} task {task.node}#{task.attempt}", project=run.project, days=1
        )
        task.api_token = token
        token_env = {"PORTAL_API_TOKEN": raw}
    return {
        **env,
        **inputs,
        **token_env,
        "PORTAL_PROJECT": run.project.slug,
        "PORTAL_PIPELINE": run.pipeline_name,
        "PORTAL_RUN_ID": str(run.pk),
        "PORTAL_TASK": task.node,
        "PORTAL_TASK_ATTEMPT": str(task.attempt),
        "PORTAL_OUTPUT_DIR": str(out),
        "PORTAL_API_URL": settings.SITE_URL.rstrip("/") + "/api/v1/",
        "PYTHONPATH": str(settings.BASE_DIR),
    }


def _revoke_task_token(task: TaskRun) -> None:
    from apps.accounts.models import ApiToken

    if task.api_token_id:
        ApiToken.objects.filter(pk=task.api_token_id, revoked_at__isnull=True).update(revoked_at=timezone.now())


def _submit(task: TaskRun, runtime, now) -> None:
    run = task.run
    node = next(n for n in run.spec["nodes"] if n["name"] == task.node)
    template = template_for(node)
    out = output_dir(task)
    out.mkdir(parents=True, exist_ok=True)
    env = _task_env(task, node, template, out)
    res = node.get("resources", {})
    timeout = node.get("timeout") or template.timeout
    workload = Workload(
        uid=f"task-{task.pk}",
        name=f"{run.project.slug}-{run.pipeline_name}-{run.number}-{task.node}-{task.attempt}",
        project=run.project.slug,
        command=[*template.command, *to_cli_args(template.args_schema, node.get("args", {}))],
        kind=template.kind,
        framework=template.framework,
        image=template.image,
        env=env,
        workdir=str(out),
        replicas={k: int(v) for k, v in (template.replicas or {}).items()},
        resources=Resources(
            cpu=float(res.get("cpu") or 0), memory_bytes=res.get("memory"), gpu=float(res.get("gpu") or 0)
        ),
        timeout=int(timeout) if timeout else None,
        labels={"task_run": str(task.pk), "run": str(run.pk), "project": run.project.slug},
    )
    task.handle = runtime.submit(workload)
    task.runtime = runtime.name
    task.status, task.queued_at, task.waiting_reason = TaskStatus.QUEUED, now, ""
    task.output_dir = str(out)
    task.save(update_fields=["handle", "runtime", "status", "queued_at", "waiting_reason", "output_dir", "api_token"])


# --- repair ---------------------------------------------------------------------------------------


def reconcile() -> list[int]:
    """Repair what events missed: lost workloads of dead agents, due retries, runs never advanced."""
    runtime = get_runtime()
    repair = getattr(runtime, "repair", None)
    if repair is not None:
        repair()
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
