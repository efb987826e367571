"""The portal's own queue in the loop of a simulated replay (apps/runtime/simulated/, docs/scheduling.md): each
trace job becomes a one-node pipeline run, and the real orchestrator and dispatcher decide everything — quotas,
priorities, waiting reasons, what starts — against the simulated runtime. For benchmarks and tests only.

Submissions are what `start_spec_run` does minus its outbox kick (no Celery in a replay): a run frozen from a spec
like any other, then `advance_run`, which creates the task and dispatches. A completion is a runtime event:
`advance_run(run, task)` as the agent or the Kubernetes controller would call it.

The portal's clock is the cluster's for the length of a replay (`virtual_clock`): every time it records (a task's
creation, hand-over, start, end, declared end) and every time the queue compares (aging, reservations) is virtual.
Each job declares its trace duration, rounded up to a whole minute, as its node's timeout: the estimate that a
reservation is computed from (a trace has no estimates of its own; users' real ones are coarser).
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest import mock

from django.db import connection, transaction
from django.db.models import Max
from django.test.utils import CaptureQueriesContext, override_settings
from django.utils import timezone

from apps.jobs import orchestrator, runstate
from apps.jobs.dispatcher import dispatch
from apps.jobs.models import JobTemplate, PipelineRun, RunStatus, TaskRun, TaskStatus
from apps.jobs.services import _freeze
from apps.projects.models import Project, Quota
from apps.projects.services import provision_project
from apps.runtime.simulated.cluster import SimCluster, SimWorkload, simulated_runtime
from apps.runtime.simulated.traces import Job, Trace
from apps.runtime.workload import Workload

TEMPLATE = "sim-gpu"
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)  # the portal's time at a replay's time 0
LABELS = {
    "greedy": "portal dispatcher (previous)",
    "backfill": "portal dispatcher (backfill)",
    "greedy+borrow": "greedy + borrowing",
    "backfill+borrow": "backfill + borrowing",
    "backfill+age": "backfill, by age (no fair share)",
    "backfill+age+borrow": "backfill by age + borrowing",
}


def policy_settings(policy: str) -> dict[str, Any]:
    """The settings a replay's policy name stands for: a queue policy, then "+age" for PORTAL_QUEUE_FAIR_SHARE off
    (backfill's order by age among equal priorities), "+borrow" for PORTAL_QUEUE_BORROWING."""
    if policy not in LABELS:
        raise ValueError(f"unknown policy {policy!r}; known: {', '.join(LABELS)}")
    name, *extras = policy.split("+")
    return {
        "PORTAL_QUEUE_POLICY": name,
        "PORTAL_QUEUE_BORROWING": "borrow" in extras,
        "PORTAL_QUEUE_FAIR_SHARE": "age" not in extras,
    }


@contextlib.contextmanager
def virtual_clock(cluster: SimCluster) -> Iterator[None]:
    """`django.utils.timezone.now()` is EPOCH + the cluster's clock for the block."""

    def now() -> datetime:
        return EPOCH + timedelta(seconds=cluster.now)

    with mock.patch("django.utils.timezone.now", now):
        yield


def prepare(trace: Trace, owner: Any) -> dict[str, Project]:
    """The trace's projects (made when missing) with its GPU quotas, and the template its jobs run."""
    JobTemplate.objects.get_or_create(
        project=None, slug=TEMPLATE, defaults={"name": "simulated GPU job", "command": ["/bin/true"]}
    )  # not preemptible: each job says whether it is (`job_spec`)
    projects = {}
    for name in trace.projects:
        project = Project.objects.filter(slug=name).first() or provision_project(owner, slug=name, name=name)
        Quota.objects.update_or_create(project=project, defaults={"gpus": trace.quotas.get(name)})
        projects[name] = Project.objects.select_related("quota").get(pk=project.pk)
    return projects


def frozen_spec(project: Project) -> dict[str, Any]:
    """A one-node run spec, validated and frozen as `start_spec_run` does (the node's resources are set per job)."""
    return _freeze(project, {"nodes": [{"name": "job", "template": TEMPLATE, "cache": False}]})


def job_spec(base: dict[str, Any], job: Job) -> dict[str, Any]:
    spec = copy.deepcopy(base)
    spec["priority"] = job.priority
    spec["nodes"][0]["resources"] = {"cpu": job.cpus, "memory": job.memory, "gpu": job.gpus}
    spec["nodes"][0]["timeout"] = math.ceil(job.duration / 60) * 60
    if job.preemptible:  # as `_freeze` writes it for a node of a preemptible template
        spec["nodes"][0]["preemptible"] = True
    return spec


class PortalDispatcher:
    """The portal's orchestrator and dispatcher as a replay policy. Use inside `simulated_runtime(cluster)`."""

    def __init__(self, cluster: SimCluster, trace: Trace, owner: Any, policy: str = "backfill") -> None:
        self.cluster, self.owner = cluster, owner
        self.label = LABELS.get(policy, policy)
        self.projects = prepare(trace, owner)
        self.specs = {name: frozen_spec(project) for name, project in self.projects.items()}
        self.numbers = {
            name: PipelineRun.objects.filter(project=p).aggregate(n=Max("number"))["n"] or 0
            for name, p in self.projects.items()
        }
        self.job_of_run: dict[int, Job] = {}
        self.task_of: dict[str, tuple[int, int]] = {}  # workload uid → (run id, task id)
        self.passes = 0
        self.pass_seconds = 0.0
        cluster.duration_of = self._duration_of

    def _duration_of(self, workload: Workload) -> tuple[str, float]:
        run_id, task_id = int(workload.labels["run"]), int(workload.labels["task_run"])
        self.task_of[workload.uid] = (run_id, task_id)
        job = self.job_of_run[run_id]
        return str(job.id), job.duration

    def submit(self, job: Job) -> None:
        project = self.projects[job.project]
        self.numbers[job.project] += 1
        run = PipelineRun.objects.create(
            project=project, created_by=self.owner, number=self.numbers[job.project], pipeline_name="sim",
            spec=job_spec(self.specs[job.project], job), priority=job.priority, created_at=timezone.now(),
        )  # fmt: skip
        self.job_of_run[run.pk] = job
        self._timed(orchestrator.advance_run, run.pk)

    def ended(self, workload: SimWorkload) -> None:
        run_id, task_id = self.task_of[workload.uid]
        self._timed(orchestrator.advance_run, run_id, task_id)

    def _timed(self, fn, *args) -> None:
        calls, made = [(fn, args)], 0
        while calls:
            fn, args = calls.pop(0)
            made += 1
            if made > 10 * len(self.job_of_run) + 10:
                raise RuntimeError(f"preemption does not settle at {self.cluster.now:.0f} s: {made} advances in a row")
            started = time.perf_counter()
            fn(*args)
            self.pass_seconds += time.perf_counter() - started
            self.passes += 1
            # Workloads the queue preempted (cancelled through the runtime) report their end, as the agent or the
            # controller reports a cancelled workload's: the orchestrator requeues the task and dispatches again.
            while self.cluster.cancelled:
                uid = self.cluster.cancelled.pop(0)
                if uid in self.task_of:
                    calls.append((orchestrator.advance_run, self.task_of[uid]))


def replay_portal(trace: Trace, cluster: SimCluster, owner: Any, policy: str = "backfill"):
    """`replay` with the portal's dispatcher following the queue policy `policy` (PORTAL_QUEUE_POLICY: "backfill",
    "greedy"; "+borrow" with PORTAL_QUEUE_BORROWING), on the cluster's clock; returns (outcome, policy)."""
    from apps.runtime.simulated.replay import replay

    runstate.forget_all()  # a replay's runs may have the ids and virtual times of an earlier one's, rolled back
    with simulated_runtime(cluster), virtual_clock(cluster), override_settings(**policy_settings(policy)):
        decider = PortalDispatcher(cluster, trace, owner, policy)
        return replay(trace, cluster, decider), decider


def dispatch_cost(*, gpus: int, queued: int, owner: Any, teams: int = 8, repeats: int = 3) -> dict[str, float]:
    """Seconds of one dispatch pass with `queued` one-GPU tasks waiting on a cluster of `gpus` GPUs: the first pass
    (fills the cluster and writes every other task's waiting reason) and, median of `repeats`, a steady pass after
    one task ended (one task starts; the reasons of the others are unchanged), and the most queries a steady pass
    made. The tasks are cancelled after."""
    trace = Trace([], {f"cost-{i + 1:02d}": gpus for i in range(teams)})
    projects = list(prepare(trace, owner).values())
    base = frozen_spec(projects[0])
    spec = copy.deepcopy(base)
    spec["nodes"][0]["resources"] = {"cpu": 1, "gpu": 1}
    start = {p.pk: PipelineRun.objects.filter(project=p).aggregate(n=Max("number"))["n"] or 0 for p in projects}
    runs = [
        PipelineRun(project=projects[i % teams], created_by=owner, pipeline_name="cost", spec=spec,
                    number=start[projects[i % teams].pk] + i // teams + 1)
        for i in range(queued)
    ]  # fmt: skip
    with transaction.atomic():
        runs = PipelineRun.objects.bulk_create(runs, batch_size=1000)
        TaskRun.objects.bulk_create(
            [TaskRun(run=r, node="job", resources={"cpu": 1, "gpu": 1}) for r in runs], batch_size=1000
        )
    ids = [r.pk for r in runs]
    cluster = SimCluster(max(gpus // 8, 1), 8, cpus_per_node=1024)
    cluster.duration_of = lambda w: ("", 3600.0 + int(w.labels["task_run"]) % 1000)
    try:
        with simulated_runtime(cluster):
            t0 = time.perf_counter()
            dispatch()
            first = time.perf_counter() - t0
            steady, queries = [], []
            for _ in range(repeats):
                ended = cluster.finish_next()
                TaskRun.objects.filter(handle=ended.uid).update(status=TaskStatus.SUCCEEDED)
                with CaptureQueriesContext(connection) as captured:
                    t0 = time.perf_counter()
                    dispatch()
                    steady.append(time.perf_counter() - t0)
                queries.append(len(captured.captured_queries))
    finally:
        TaskRun.objects.filter(run_id__in=ids).exclude(status=TaskStatus.SUCCEEDED).update(status=TaskStatus.CANCELLED)
        PipelineRun.objects.filter(pk__in=ids).update(status=RunStatus.CANCELLED)
    steady.sort()
    return {"first": first, "steady": steady[len(steady) // 2], "steady_queries": max(queries)}
