"""A run's resource usage over time, for the chart of its page: per task attempt, CPU % and resident memory from the
`ResourceSample` rows the agent writes (about one a second, stored ten at a time).

A task that ran for a day has ~86,000 samples: each series is cut down on the server with Largest-Triangle-Three-
Buckets (the metric charts' downsampling, apps/models/lttb.py) to `points`, so the browser draws a few hundred
points per task whatever the run's length. The samples are read as raw columns, not model instances.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import numpy as np
from django.db.models import Avg
from django.db.models.functions import TruncMinute
from django.utils import timezone

from apps.jobs.models import PipelineRun, ResourceSample, TaskRun
from apps.projects.models import Project
from apps.runtime.usage import Holder, Measured, label_ids, measure, project_holders
from portal.lib.lttb import lttb

DEFAULT_POINTS = 300
MIN_POINTS = 3
MAX_POINTS = 2000


def _series(t: np.ndarray, values: np.ndarray, points: int) -> dict[str, list[float]]:
    st, sv = lttb(t, values, points)
    return {"t": [int(x) for x in st], "v": sv.tolist()}


def usage_series(run: PipelineRun, points: int = DEFAULT_POINTS) -> dict[str, Any]:
    """`{"run", "status", "active", "points", "tasks": [{"task", "node", "attempt", "replica", "status", "total",
    "cpu": {"t", "v"}, "rss": {"t", "v"}, "gpu": {"t", "v"} | None, "gpu_memory": {"t", "v"} | None,
    "warnings": [...]}]}`: one entry per task attempt and replica (a distributed task has one per replica, "master-0",
    "worker-0", …), times in ms since the epoch, CPU in % of one core, memory in bytes, GPU utilisation in % (None
    where no GPU was sampled). Tasks without samples are left out; `active` says whether more samples may come (the
    run has not finished); `warnings` are the attempt's resource warnings that name this replica."""
    rows = (
        ResourceSample.objects.filter(task__run=run)
        .order_by("task_id", "replica", "ts", "id")
        .values_list("task_id", "replica", "ts", "cpu_percent", "rss_bytes", "gpu_percent", "gpu_memory_bytes")
    )
    by_key: dict[tuple[int, str], list[tuple[float, ...]]] = {}
    for task_id, replica, ts, cpu, rss, gpu, gpu_memory in rows.iterator(chunk_size=5000):
        by_key.setdefault((task_id, replica), []).append(
            (
                ts.timestamp() * 1000.0,
                cpu,
                float(rss),
                np.nan if gpu is None else gpu,
                np.nan if gpu_memory is None else float(gpu_memory),
            )
        )
    task_ids = {task_id for task_id, _r in by_key}
    tasks = (
        TaskRun.objects.filter(pk__in=task_ids)
        .only("id", "node", "attempt", "status", "resource_warnings")
        .order_by("node", "attempt")
    )
    series = []
    for task in tasks:
        for replica in sorted(r for t, r in by_key if t == task.pk):
            data = np.array(by_key[(task.pk, replica)], dtype=np.float64)
            series.append(
                {
                    "task": task.pk,
                    "node": task.node,
                    "attempt": task.attempt,
                    "replica": replica,
                    "status": task.status,
                    "total": len(data),
                    "cpu": _series(data[:, 0], data[:, 1], points),
                    "rss": _series(data[:, 0], data[:, 2], points),
                    "gpu": _gpu_series(data[:, 0], data[:, 3], points),
                    "gpu_memory": _gpu_series(data[:, 0], data[:, 4], points),
                    "warnings": [w for w in task.resource_warnings if w.get("replica", "") == replica],
                }
            )
    return {"run": run.pk, "status": run.status, "active": not run.is_finished, "points": points, "tasks": series}


def _gpu_series(t: np.ndarray, values: np.ndarray, points: int) -> dict[str, list[float]] | None:
    """The samples that read a GPU (None: none did, a task without GPUs)."""
    known = ~np.isnan(values)
    if not known.any():
        return None
    return _series(t[known], values[known], points)


LIVE_SECONDS = 15  # a replica whose latest sample is older than this uses nothing now (it is between samples ×10)


def measure_holders(holders: list[Holder]) -> None:
    """The capacity page's and a project's live use of tasks (`hooks.register_measurer`): each holder's latest
    sample per replica from the last `LIVE_SECONDS`, summed over its replicas, in one query for all of them.

    Samples are stored ten seconds at a time (`TaskSink`), so "now" is up to that old."""
    ids = label_ids(holders, "task_run")
    if not ids:
        return
    since = timezone.now() - timedelta(seconds=LIVE_SECONDS)
    rows = (
        ResourceSample.objects.filter(task_id__in=ids, ts__gte=since)
        .order_by("task_id", "replica", "ts", "id")
        .values_list("task_id", "replica", "cpu_percent", "rss_bytes", "gpu_percent", "gpu_memory_bytes")
    )
    latest: dict[tuple[int, str], tuple] = {}
    for task_id, replica, *values in rows:
        latest[(task_id, replica)] = tuple(values)  # ordered by time: the last one wins
    by_task: dict[int, Measured] = {}
    for (task_id, _replica), (cpu, rss, gpu, gpu_memory) in latest.items():
        one = Measured(cpu=cpu / 100, memory_bytes=rss, gpu_memory_bytes=gpu_memory, gpu_percent=gpu, replicas=1)
        by_task.setdefault(task_id, Measured()).add(one)
    for holder in holders:
        value = holder.labels.get("task_run")
        if value is not None and str(value).isdigit():
            holder.measured = by_task.get(int(value), Measured())


RECENT_MINUTES = 60


def project_usage(project: Project) -> dict[str, Any]:
    """What a project's running tasks use now and used in the last hour, against its quota: `{"project", "quota":
    {"cpu", "memory_bytes", "gpu"} (None: no limit), "now": totals, "tasks": [{"task", "run", "node", "attempt",
    "now"}], "recent": [{"t", "cpu", "memory_bytes", "gpu_memory_bytes", "gpu_percent"}]}`. CPU in cores; "recent"
    is one point a minute: the sum over the replicas of each one's mean in that minute."""
    holders = [h for h in project_holders(project) if "task_run" in h.labels]
    now = measure(holders)
    quota = getattr(project, "quota", None)
    tasks = {
        t.pk: t for t in TaskRun.objects.filter(pk__in=label_ids(holders, "task_run")).only("run_id", "node", "attempt")
    }
    rows = []
    for holder in holders:
        task = tasks.get(int(holder.labels["task_run"])) if str(holder.labels["task_run"]).isdigit() else None
        if task is not None:
            measured = holder.measured or Measured()
            rows.append(
                {
                    "task": task.pk,
                    "run": task.run_id,
                    "node": task.node,
                    "attempt": task.attempt,
                    "now": measured.to_json(),
                }
            )
    return {
        "project": project.slug,
        "quota": {
            "cpu": None if quota is None or quota.cpu_cores is None else float(quota.cpu_cores),
            "memory_bytes": getattr(quota, "memory_bytes", None),
            "gpu": None if quota is None or quota.gpus is None else float(quota.gpus),
        },
        "now": now.to_json(),
        "tasks": rows,
        "recent": recent_usage(project),
    }


def recent_usage(project: Project, minutes: int = RECENT_MINUTES) -> list[dict[str, Any]]:
    """Per minute of the last `minutes`, the project's tasks' use (see `project_usage`), in one grouped query."""
    since = timezone.now() - timedelta(minutes=minutes)
    rows = (
        ResourceSample.objects.filter(task__run__project=project, ts__gte=since)
        .annotate(minute=TruncMinute("ts"))
        .values("minute", "task_id", "replica")
        .annotate(
            cpu=Avg("cpu_percent"), rss=Avg("rss_bytes"), gpu=Avg("gpu_percent"), gpu_memory=Avg("gpu_memory_bytes")
        )
        .order_by("minute")
    )
    by_minute: dict[Any, Measured] = {}
    for row in rows:
        one = Measured(
            cpu=row["cpu"] / 100,
            memory_bytes=row["rss"],
            gpu_percent=row["gpu"],
            gpu_memory_bytes=row["gpu_memory"],
            replicas=1,
        )
        by_minute.setdefault(row["minute"], Measured()).add(one)
    return [{"t": int(minute.timestamp() * 1000), **m.to_json()} for minute, m in sorted(by_minute.items())]
