"""What the orchestrator reads about a run on every event, kept cheap enough to do per task.

- `plan_of(run)`: the run's frozen spec, parsed once per process. A run's spec never changes after it
  starts, so the graph (nodes by name, topological order, downstream edges) is cached, keyed by the run's
  id *and* creation time (ids are reused by a flushed test database or a restored backup).
- `node_states(run_id)`: the newest attempt of each node as narrow rows (id, node, attempt, status and the
  two reasons): JSON and timestamp columns of every attempt are what made each event O(nodes) in Python.
- `status_payload(...)`: the run page's status message; events send only the nodes that changed.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db.models import Q

from apps.jobs.dag import topological_order
from apps.jobs.models import TASK_FINISHED, PipelineRun, TaskRun

STATE_FIELDS = ("id", "run_id", "node", "attempt", "status", "reason", "waiting_reason")
# What applying the runtime's report to an active task needs besides (saved with save(): loaded fields only).
ACTIVE_FIELDS = (
    "runtime", "handle", "output_dir", "cache_key", "resources", "api_token_id", "started_at", "replicas",
    "preempted_at", "created_at",
)  # fmt: skip
_PLAN_CACHE_SIZE = 512


@dataclass(frozen=True)
class RunPlan:
    nodes: dict[str, dict[str, Any]]
    order: tuple[str, ...]  # topological: upstreams first
    downstream: dict[str, tuple[str, ...]]
    parallelism: int
    fail_fast: bool
    env: dict[str, Any]

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> RunPlan:
        nodes = {n["name"]: n for n in spec.get("nodes", [])}
        graph = {name: list(node.get("depends_on", [])) for name, node in nodes.items()}
        downstream: dict[str, list[str]] = {name: [] for name in nodes}
        for name, deps in graph.items():
            for dep in deps:
                downstream.setdefault(dep, []).append(name)
        return cls(
            nodes=nodes,
            order=tuple(topological_order(graph)),
            downstream={k: tuple(v) for k, v in downstream.items()},
            parallelism=int(spec.get("parallelism") or 0),
            fail_fast=spec.get("failure_policy", "fail_fast") == "fail_fast",
            env=dict(spec.get("env") or {}),
        )


def declared_timeout(node: dict[str, Any]) -> int | None:
    """A frozen node's declared timeout in whole seconds, as copied onto each of its task rows (`TaskRun.timeout`);
    None where it declares none (its template's then counts, `dispatcher._Timeouts`) or one that is not a whole
    number of seconds (validation allows none such; a row then says nothing rather than something else)."""
    timeout = node.get("timeout")
    return timeout if type(timeout) is int and timeout > 0 else None


_plans: OrderedDict[tuple[int, str], RunPlan] = OrderedDict()
_plans_lock = threading.Lock()
_plans_capacity = _PLAN_CACHE_SIZE  # grows to the largest queue a pass has walked (`hold_plans`)


def plan_of(run: PipelineRun) -> RunPlan:
    """The parsed frozen spec of `run` (which may have been loaded with `spec` deferred)."""
    held = run.__dict__.get(_PLAN_ATTR)
    if held is not None:
        return held
    key = _key(run)
    with _plans_lock:
        plan = _plans.get(key)
        if plan is not None:
            _plans.move_to_end(key)
            return plan
    if "spec" in run.get_deferred_fields():
        spec = PipelineRun.objects.values_list("spec", flat=True).get(pk=run.pk)
    else:
        spec = run.spec
    plan = RunPlan.from_spec(spec)
    _remember(key, plan)
    return plan


def hold_plans(runs: Iterable[PipelineRun]) -> None:
    """Give each of `runs` its plan for as long as the instance lives: from the cache, the others' specs read in one
    query. The queue calls it once per pass with the waiting runs. The cache grows to hold them all: walking more
    runs than it holds in the same order every pass, an LRU cache misses on every one (a pass past 512 waiting runs
    read each one's spec, twice, one query each)."""
    global _plans_capacity
    runs = [run for run in runs if _PLAN_ATTR not in run.__dict__]
    # Room for every run of the pass besides the usual working set: the next pass finds them all.
    _plans_capacity = max(_plans_capacity, len(runs) + _PLAN_CACHE_SIZE)
    missing: list[PipelineRun] = []
    with _plans_lock:
        for run in runs:
            plan = _plans.get(_key(run))
            if plan is None:
                missing.append(run)
            else:
                _plans.move_to_end(_key(run))
                run.__dict__[_PLAN_ATTR] = plan
    if not missing:
        return
    deferred = [run.pk for run in missing if "spec" in run.get_deferred_fields()]
    specs = dict(PipelineRun.objects.filter(pk__in=deferred).values_list("pk", "spec")) if deferred else {}
    for run in missing:
        spec = specs.pop(run.pk, None)
        if spec is None:  # not deferred: the instance has it (`specs.get(pk, run.spec)` would read it if deferred)
            spec = run.spec
        plan = RunPlan.from_spec(spec)
        run.__dict__[_PLAN_ATTR] = plan
        _remember(_key(run), plan)


_PLAN_ATTR = "_portal_run_plan"  # where `hold_plans` leaves a run instance's plan


def _key(run: PipelineRun) -> tuple[int, str]:
    return (run.pk, run.created_at.isoformat())


def _remember(key: tuple[int, str], plan: RunPlan) -> None:
    with _plans_lock:
        _plans[key] = plan
        _plans.move_to_end(key)
        while len(_plans) > _plans_capacity:
            _plans.popitem(last=False)


def node_states(run_id: int) -> dict[str, TaskRun]:
    """The newest attempt of each node, with only the fields the orchestrator decides on."""
    latest: dict[str, TaskRun] = {}
    for task in TaskRun.objects.filter(run_id=run_id).only(*STATE_FIELDS, *ACTIVE_FIELDS).order_by("node", "attempt"):
        latest[task.node] = task
    return latest


@dataclass
class _Seen:
    """What this process last read of a run's attempts: the finished newest attempts (such a row never changes
    again), the ids of the unfinished ones, and the highest id read."""

    finished: dict[str, TaskRun]
    unfinished: set[int]
    last_pk: int


_seen: OrderedDict[tuple[int, str], _Seen] = OrderedDict()
_seen_lock = threading.Lock()
# Runs whose attempts a process keeps (the most recently advanced; a finished run's are dropped at once): a
# 2,000-node run's are ~2,000 model instances.
_SEEN_RUNS = 64


def locked_node_states(run: PipelineRun) -> dict[str, TaskRun]:
    """`node_states` for a caller that holds the run's row lock (an advance), reading only what may have changed
    since this process last looked: the attempts it saw unfinished and those created since. Every attempt of a run
    is created by an advance, under that lock, and committed before the next one takes it, so a row with an id
    above the highest this process read is a new one and no row below it can appear later; a finished attempt is
    never changed again (a retry is a new attempt). Without this, each event of an n-node run read n rows: a
    2,000-node chain read two million over its run. Instances of finished attempts are shared between advances
    of this process: the orchestrator does not change a finished attempt."""
    key = _key(run)
    with _seen_lock:
        seen = _seen.pop(key, None)
    if seen is None:
        latest = node_states(run.pk)
        last_pk = max((t.pk for t in latest.values()), default=0)
    else:
        latest = dict(seen.finished)
        last_pk = seen.last_pk
        changed = TaskRun.objects.filter(
            Q(run_id=run.pk, pk__gt=seen.last_pk) | Q(run_id=run.pk, pk__in=seen.unfinished)
        ).only(*STATE_FIELDS, *ACTIVE_FIELDS)
        for task in sorted(changed, key=lambda t: t.attempt):
            current = latest.get(task.node)
            if current is None or current.attempt <= task.attempt:
                latest[task.node] = task
            last_pk = max(last_pk, task.pk)
    finished = {name: t for name, t in latest.items() if t.status in TASK_FINISHED}
    unfinished = {t.pk for t in latest.values() if t.status not in TASK_FINISHED}
    with _seen_lock:
        _seen[key] = _Seen(finished, unfinished, last_pk)
        while len(_seen) > _SEEN_RUNS:
            _seen.popitem(last=False)
    return latest


def forget_node_states(run: PipelineRun) -> None:
    """Drop what `locked_node_states` keeps of a run (it ended: no advance will read it again)."""
    with _seen_lock:
        _seen.pop(_key(run), None)


def forget_all() -> None:
    """Drop every plan and attempt this process keeps. For replays on a virtual clock (apps/jobs/simulation.py):
    after a test's rollback, runs come back with the same ids and the same (virtual) creation times, which is what
    the caches key on."""
    with _plans_lock:
        _plans.clear()
    with _seen_lock:
        _seen.clear()


def node_status(task: TaskRun | None) -> dict[str, Any]:
    if task is None:
        return {"status": "pending", "attempt": 0, "waiting_reason": "", "reason": ""}
    return {
        "status": task.status,
        "attempt": task.attempt,
        "waiting_reason": task.waiting_reason,
        "reason": task.reason,
    }


def status_payload(
    run: PipelineRun, plan: RunPlan, tasks: dict[str, TaskRun], only: Iterable[str] | None = None
) -> dict[str, Any]:
    """The run's status message: run status, progress and the nodes in `only` (default: all of them)."""
    wanted = None if only is None else set(only)
    names = plan.order if wanted is None else [name for name in plan.order if name in wanted]
    return {
        "type": "run.status",
        "run": run.pk,
        "status": run.status,
        "reason": run.reason,
        "done": sum(1 for t in tasks.values() if t.status in TASK_FINISHED),
        "total": len(plan.nodes),
        "nodes": {name: node_status(tasks.get(name)) for name in names},
    }
